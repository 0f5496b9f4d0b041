#include "server/frontend/http/rest_server.h"

#include <civetweb.h>
#include <grpcpp/client_context.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "nlohmann/json.hpp"
#include "server/logging/request_id.h"
#include "server/metrics/civetweb_start.h"
#include "spdlog/spdlog.h"

namespace coalesce {
namespace {

using json = nlohmann::json;
using inference::InferParameter;
using inference::ModelInferRequest;
using inference::ModelInferResponse;

constexpr int kWorkers = 16;
constexpr int kRequestTimeoutMs = 30000;
constexpr char kHeaderLength[] = "Inference-Header-Content-Length";
// Deeper "data" nesting than any served tensor's rank is refused, which
// also bounds the recursion that flattens it.
constexpr int kMaxDataDepth = 16;
// Bodies of the calls other than infer (registrations, index queries).
constexpr int64_t kMaxSmallBody = 64 << 10;

int LogMessage(const mg_connection* /*conn*/, const char* message) {
  spdlog::warn("http: {}", message);
  return 1;
}

// What one request is answered with.
struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // The JSON part's length when binary data follows it; -1: none follows.
  int64_t header_length = -1;
};

Reply JsonReply(int status, const json& body) {
  return {status, "application/json", body.dump(), -1};
}

Reply ErrorReply(int status, absl::string_view message) {
  return JsonReply(status, json{{"error", std::string(message)}});
}

// The one mapping of the call's status to HTTP.
int HttpStatus(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED:
      return 409;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    default:
      return 500;
  }
}

Reply StatusReply(const grpc::Status& status) {
  return ErrorReply(HttpStatus(status.error_code()), status.error_message());
}

Reply StatusReply(const absl::Status& status) {
  return StatusReply(grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                                  std::string(status.message())));
}

// A body too large (413: refused before it was read) or cut short.
Reply BodyErrorReply(const absl::Status& status) {
  return ErrorReply(
      status.code() == absl::StatusCode::kResourceExhausted ? 413 : 400,
      status.message());
}

// Header values become gRPC metadata, which allows only printable ASCII.
bool PrintableAscii(absl::string_view s) {
  for (const char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// The caller's credentials, passed on as gRPC metadata so that the
// service authenticates a REST call exactly as a gRPC one.
absl::Status Forward(mg_connection* conn, grpc::ClientContext* context) {
  for (const auto& [header, key] :
       {std::pair<const char*, const char*>{"Authorization", "authorization"},
        {"x-coalesce-client", "x-coalesce-client"}}) {
    const char* value = mg_get_header(conn, header);
    if (value == nullptr) continue;
    if (!PrintableAscii(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(header, ": not printable ASCII"));
    }
    context->AddMetadata(key, value);
  }
  return absl::OkStatus();
}

// The body, read as it arrives (never allocated from what Content-Length
// claims); RESOURCE_EXHAUSTED past limit.
absl::StatusOr<std::string> ReadBody(mg_connection* conn, int64_t limit) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (info->content_length > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request body: ", info->content_length,
                     " bytes, above the server's limit of ", limit));
  }
  std::string body;
  char chunk[64 * 1024];
  while (true) {
    const int n = mg_read(conn, chunk, sizeof(chunk));
    if (n < 0) return absl::InvalidArgumentError("request body: read failed");
    if (n == 0) break;
    if (static_cast<int64_t>(body.size()) + n > limit) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "request body: above the server's limit of ", limit, " bytes"));
    }
    body.append(chunk, n);
  }
  return body;
}

// The size of one element of datatype in JSON "data"; 0 for the datatypes
// that travel only as binary data.
int JsonElementBytes(absl::string_view datatype) {
  if (datatype == "BOOL" || datatype == "INT8" || datatype == "UINT8") return 1;
  if (datatype == "INT16" || datatype == "UINT16") return 2;
  if (datatype == "INT32" || datatype == "UINT32" || datatype == "FP32") {
    return 4;
  }
  if (datatype == "INT64" || datatype == "UINT64" || datatype == "FP64") {
    return 8;
  }
  return 0;
}

template <typename T>
void AppendRaw(T value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
absl::Status AppendInteger(const json& v, std::string* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return absl::InvalidArgumentError("out of range");
    }
    AppendRaw(static_cast<T>(u), out);
    return absl::OkStatus();
  }
  if (!v.is_number_integer()) {
    return absl::InvalidArgumentError("not an integer");
  }
  const int64_t i = v.get<int64_t>();
  if constexpr (std::is_unsigned_v<T>) {
    if (i < 0) return absl::InvalidArgumentError("out of range");
  } else {
    if (i < std::numeric_limits<T>::min() ||
        i > std::numeric_limits<T>::max()) {
      return absl::InvalidArgumentError("out of range");
    }
  }
  AppendRaw(static_cast<T>(i), out);
  return absl::OkStatus();
}

absl::Status AppendElement(const json& v, absl::string_view datatype,
                           std::string* out) {
  if (datatype == "BOOL") {
    if (!v.is_boolean()) return absl::InvalidArgumentError("not a bool");
    AppendRaw<uint8_t>(v.get<bool>() ? 1 : 0, out);
    return absl::OkStatus();
  }
  if (datatype == "FP32" || datatype == "FP64") {
    if (!v.is_number()) return absl::InvalidArgumentError("not a number");
    if (datatype == "FP32") {
      AppendRaw(v.get<float>(), out);
    } else {
      AppendRaw(v.get<double>(), out);
    }
    return absl::OkStatus();
  }
  if (datatype == "INT8") return AppendInteger<int8_t>(v, out);
  if (datatype == "INT16") return AppendInteger<int16_t>(v, out);
  if (datatype == "INT32") return AppendInteger<int32_t>(v, out);
  if (datatype == "INT64") return AppendInteger<int64_t>(v, out);
  if (datatype == "UINT8") return AppendInteger<uint8_t>(v, out);
  if (datatype == "UINT16") return AppendInteger<uint16_t>(v, out);
  if (datatype == "UINT32") return AppendInteger<uint32_t>(v, out);
  return AppendInteger<uint64_t>(v, out);
}

// Appends "data" (flat, or nested as the protocol allows) as raw bytes;
// INVALID_ARGUMENT naming the element that is not of datatype.
absl::Status AppendData(const json& data, absl::string_view datatype,
                        const std::string& field, int depth, int64_t* index,
                        std::string* out) {
  if (data.is_array()) {
    if (depth >= kMaxDataDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": nested deeper than ", kMaxDataDepth));
    }
    for (const json& v : data) {
      if (absl::Status s =
              AppendData(v, datatype, field, depth + 1, index, out);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  const absl::Status s = AppendElement(data, datatype, out);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "[", *index, "]: ", s.message(), " for ", datatype));
  }
  ++*index;
  return absl::OkStatus();
}

// One JSON "parameters" object into the protocol's map; the names in skip
// (the binary extension's, consumed here) are left out.
absl::Status ToParameters(
    const json& params, const std::string& field,
    std::initializer_list<absl::string_view> skip,
    google::protobuf::Map<std::string, InferParameter>* out) {
  if (!params.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": not an object"));
  }
  for (const auto& [name, value] : params.items()) {
    bool skipped = false;
    for (absl::string_view s : skip) skipped = skipped || name == s;
    if (skipped) continue;
    InferParameter p;
    if (value.is_boolean()) {
      p.set_bool_param(value.get<bool>());
    } else if (value.is_number_unsigned()) {
      const uint64_t u = value.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        p.set_uint64_param(u);
      } else {
        p.set_int64_param(static_cast<int64_t>(u));
      }
    } else if (value.is_number_integer()) {
      p.set_int64_param(value.get<int64_t>());
    } else if (value.is_number()) {
      p.set_double_param(value.get<double>());
    } else if (value.is_string()) {
      p.set_string_param(value.get<std::string>());
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".", name, ": must be a bool, a number or a string"));
    }
    (*out)[name] = std::move(p);
  }
  return absl::OkStatus();
}

std::optional<bool> BoolIn(const json& object, const char* name) {
  if (!object.is_object()) return std::nullopt;
  const auto it = object.find(name);
  if (it == object.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

// What the client asked of the outputs' encoding, and where each raw input
// came from.
struct OutputEncoding {
  // By raw_input_contents index: the REST field that carried its bytes.
  std::vector<std::string> raw_fields;
  bool binary_default = false;
  std::vector<std::pair<std::string, bool>> binary_by_name;
  bool Binary(const std::string& name) const {
    for (const auto& [n, b] : binary_by_name) {
      if (n == name) return b;
    }
    return binary_default;
  }
};

// The request body (JSON of header_length bytes, then binary data) as the
// protocol's ModelInferRequest. INVALID_ARGUMENT names the JSON field.
absl::Status ParseInfer(const std::string& body, int64_t header_length,
                        ModelInferRequest* request, OutputEncoding* encoding) {
  const absl::string_view text =
      absl::string_view(body).substr(0, static_cast<size_t>(header_length));
  const absl::string_view binary =
      absl::string_view(body).substr(static_cast<size_t>(header_length));
  const json j = json::parse(text.begin(), text.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        "request body: not a JSON object (malformed JSON)");
  }
  if (const auto id = j.find("id"); id != j.end()) {
    if (!id->is_string()) return absl::InvalidArgumentError("id: not a string");
    request->set_id(id->get<std::string>());
  }
  if (const auto params = j.find("parameters"); params != j.end()) {
    if (absl::Status s =
            ToParameters(*params, "parameters", {"binary_data_output"},
                         request->mutable_parameters());
        !s.ok()) {
      return s;
    }
    encoding->binary_default =
        BoolIn(*params, "binary_data_output").value_or(false);
  }
  const auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array()) {
    return absl::InvalidArgumentError("inputs: missing or not an array");
  }
  size_t binary_offset = 0;
  for (size_t i = 0; i < inputs->size(); ++i) {
    const json& in = (*inputs)[i];
    const std::string field = absl::StrCat("inputs[", i, "]");
    if (!in.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": not an object"));
    }
    auto* tensor = request->add_inputs();
    const auto name = in.find("name");
    if (name == in.end() || !name->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".name: missing or not a string"));
    }
    tensor->set_name(name->get<std::string>());
    const auto datatype = in.find("datatype");
    if (datatype == in.end() || !datatype->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".datatype: missing or not a string"));
    }
    tensor->set_datatype(datatype->get<std::string>());
    const auto shape = in.find("shape");
    if (shape == in.end() || !shape->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape: missing or not an array"));
    }
    for (size_t d = 0; d < shape->size(); ++d) {
      const json& dim = (*shape)[d];
      if (!dim.is_number_integer() ||
          (!dim.is_number_unsigned() && dim.get<int64_t>() < 0) ||
          (dim.is_number_unsigned() &&
           dim.get<uint64_t>() >
               static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".shape[", d, "]: not a non-negative integer"));
      }
      tensor->add_shape(dim.get<int64_t>());
    }
    std::optional<int64_t> binary_size;
    if (const auto params = in.find("parameters"); params != in.end()) {
      if (absl::Status s =
              ToParameters(*params, field + ".parameters", {"binary_data_size"},
                           tensor->mutable_parameters());
          !s.ok()) {
        return s;
      }
      if (const auto size = params->find("binary_data_size");
          size != params->end()) {
        if (!size->is_number_unsigned()) {
          return absl::InvalidArgumentError(
              absl::StrCat(field,
                           ".parameters.binary_data_size: not a non-negative "
                           "integer"));
        }
        const uint64_t n = size->get<uint64_t>();
        if (n > binary.size() - binary_offset) {
          return absl::InvalidArgumentError(absl::StrCat(
              field, ".parameters.binary_data_size: ", n,
              " bytes, but the body has ", binary.size() - binary_offset,
              " binary bytes left"));
        }
        binary_size = static_cast<int64_t>(n);
      }
    }
    const auto data = in.find("data");
    if (binary_size.has_value()) {
      if (data != in.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".data: given with parameters.binary_data_size"));
      }
      encoding->raw_fields.push_back(field + ".parameters.binary_data_size");
      request->add_raw_input_contents()->assign(
          binary.data() + binary_offset, static_cast<size_t>(*binary_size));
      binary_offset += static_cast<size_t>(*binary_size);
      continue;
    }
    if (data == in.end()) {
      // Its bytes are in a shared-memory region the service resolves.
      if (tensor->parameters().contains("shared_memory_region")) continue;
      return absl::InvalidArgumentError(absl::StrCat(field, ".data: missing"));
    }
    if (JsonElementBytes(tensor->datatype()) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".datatype: ", tensor->datatype(),
          " travels only as binary data (parameters.binary_data_size)"));
    }
    encoding->raw_fields.push_back(field + ".data");
    std::string* raw = request->add_raw_input_contents();
    int64_t index = 0;
    if (absl::Status s = AppendData(*data, tensor->datatype(), field + ".data",
                                    0, &index, raw);
        !s.ok()) {
      return s;
    }
  }
  if (binary_offset != binary.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs: the binary_data_size parameters add up to ", binary_offset,
        " bytes, but the body has ", binary.size(), " after the JSON"));
  }
  if (const auto outputs = j.find("outputs"); outputs != j.end()) {
    if (!outputs->is_array()) {
      return absl::InvalidArgumentError("outputs: not an array");
    }
    for (size_t i = 0; i < outputs->size(); ++i) {
      const json& out = (*outputs)[i];
      const std::string field = absl::StrCat("outputs[", i, "]");
      const auto name = out.is_object() ? out.find("name") : out.end();
      if (!out.is_object() || name == out.end() || !name->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".name: missing or not a string"));
      }
      auto* tensor = request->add_outputs();
      tensor->set_name(name->get<std::string>());
      if (const auto params = out.find("parameters"); params != out.end()) {
        if (absl::Status s =
                ToParameters(*params, field + ".parameters", {"binary_data"},
                             tensor->mutable_parameters());
            !s.ok()) {
          return s;
        }
        if (std::optional<bool> b = BoolIn(*params, "binary_data")) {
          encoding->binary_by_name.emplace_back(tensor->name(), *b);
        }
      }
    }
  }
  return absl::OkStatus();
}

json ParametersJson(
    const google::protobuf::Map<std::string, InferParameter>& params) {
  json out = json::object();
  for (const auto& [name, p] : params) {
    switch (p.parameter_choice_case()) {
      case InferParameter::kBoolParam:
        out[name] = p.bool_param();
        break;
      case InferParameter::kInt64Param:
        out[name] = p.int64_param();
        break;
      case InferParameter::kUint64Param:
        out[name] = p.uint64_param();
        break;
      case InferParameter::kDoubleParam:
        out[name] = p.double_param();
        break;
      case InferParameter::kStringParam:
        out[name] = p.string_param();
        break;
      default:
        break;
    }
  }
  return out;
}

template <typename T>
json Elements(absl::string_view raw) {
  json data = json::array();
  for (size_t at = 0; at + sizeof(T) <= raw.size(); at += sizeof(T)) {
    T v;
    std::memcpy(&v, raw.data() + at, sizeof(T));
    data.push_back(v);
  }
  return data;
}

json DataJson(absl::string_view datatype, absl::string_view raw) {
  if (datatype == "BOOL") {
    json data = json::array();
    for (const char c : raw) data.push_back(c != 0);
    return data;
  }
  if (datatype == "INT8") return Elements<int8_t>(raw);
  if (datatype == "INT16") return Elements<int16_t>(raw);
  if (datatype == "INT32") return Elements<int32_t>(raw);
  if (datatype == "INT64") return Elements<int64_t>(raw);
  if (datatype == "UINT8") return Elements<uint8_t>(raw);
  if (datatype == "UINT16") return Elements<uint16_t>(raw);
  if (datatype == "UINT32") return Elements<uint32_t>(raw);
  if (datatype == "UINT64") return Elements<uint64_t>(raw);
  if (datatype == "FP32") return Elements<float>(raw);
  return Elements<double>(raw);
}

// The service names gRPC's raw_input_contents[k]; a REST client sent
// those bytes as an input's data or binary data.
grpc::Status InRestFields(const grpc::Status& status,
                          const OutputEncoding& encoding) {
  constexpr absl::string_view kRaw = "raw_input_contents[";
  const std::string& message = status.error_message();
  if (!absl::StartsWith(message, kRaw)) return status;
  const size_t close = message.find(']');
  size_t k = 0;
  if (close == std::string::npos ||
      !absl::SimpleAtoi(
          absl::string_view(message).substr(kRaw.size(), close - kRaw.size()),
          &k) ||
      k >= encoding.raw_fields.size()) {
    return status;
  }
  return grpc::Status(status.error_code(),
                      encoding.raw_fields[k] + message.substr(close + 1));
}

Reply InferReply(const ModelInferResponse& response,
                 const OutputEncoding& encoding) {
  json j = {{"model_name", response.model_name()},
            {"model_version", response.model_version()}};
  if (!response.id().empty()) j["id"] = response.id();
  if (!response.parameters().empty()) {
    j["parameters"] = ParametersJson(response.parameters());
  }
  json outputs = json::array();
  std::string binary;
  bool any_binary = false;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& out = response.outputs(i);
    json o = {{"name", out.name()},
              {"datatype", out.datatype()},
              {"shape", json(std::vector<int64_t>(out.shape().begin(),
                                                  out.shape().end()))}};
    json params = ParametersJson(out.parameters());
    const bool in_shared_memory =
        out.parameters().contains("shared_memory_region");
    const absl::string_view raw = i < response.raw_output_contents_size()
                                      ? response.raw_output_contents(i)
                                      : absl::string_view();
    if (!in_shared_memory) {
      if (encoding.Binary(out.name()) ||
          JsonElementBytes(out.datatype()) == 0) {
        params["binary_data_size"] = raw.size();
        any_binary = true;
        binary.append(raw.data(), raw.size());
      } else {
        o["data"] = DataJson(out.datatype(), raw);
      }
    }
    if (!params.empty()) o["parameters"] = std::move(params);
    outputs.push_back(std::move(o));
  }
  j["outputs"] = std::move(outputs);
  Reply reply{200, "application/json", j.dump(), -1};
  if (any_binary) {
    reply.header_length = static_cast<int64_t>(reply.body.size());
    reply.content_type = "application/octet-stream";
    reply.body += binary;
  }
  return reply;
}

json TensorsJson(const google::protobuf::RepeatedPtrField<
                 inference::ModelMetadataResponse::TensorMetadata>& tensors) {
  json out = json::array();
  for (const auto& t : tensors) {
    out.push_back({{"name", t.name()},
                   {"datatype", t.datatype()},
                   {"shape", json(std::vector<int64_t>(t.shape().begin(),
                                                       t.shape().end()))}});
  }
  return out;
}

// A protocol message as the KServe/Triton REST JSON carries it: proto
// field names, 64-bit integers as numbers (as Triton writes them, and as
// perf_analyzer reads them, unlike protobuf's JSON mapping), enums by name,
// maps as objects. Scalars are always written; messages when set.
json ProtoJson(const google::protobuf::Message& m);

json FieldValue(const google::protobuf::Message& m,
                const google::protobuf::FieldDescriptor* f, int index) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f);
    case FD::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f);
    case FD::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
    case FD::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f);
    case FD::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f);
    case FD::CPPTYPE_FLOAT:
      return rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f);
    case FD::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f);
    case FD::CPPTYPE_ENUM:
      return (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name();
    case FD::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
    case FD::CPPTYPE_MESSAGE:
      return ProtoJson(rep ? r->GetRepeatedMessage(m, f, index)
                           : r->GetMessage(m, f));
  }
  return nullptr;
}

json ProtoJson(const google::protobuf::Message& m) {
  json out = json::object();
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_map()) {
      json map = json::object();
      const google::protobuf::FieldDescriptor* key =
          f->message_type()->map_key();
      const google::protobuf::FieldDescriptor* value =
          f->message_type()->map_value();
      for (int k = 0; k < r->FieldSize(m, f); ++k) {
        const google::protobuf::Message& entry = r->GetRepeatedMessage(m, f, k);
        const json name = FieldValue(entry, key, 0);
        map[name.is_string() ? name.get<std::string>() : name.dump()] =
            FieldValue(entry, value, 0);
      }
      out[f->name()] = std::move(map);
    } else if (f->is_repeated()) {
      json list = json::array();
      for (int k = 0; k < r->FieldSize(m, f); ++k) {
        list.push_back(FieldValue(m, f, k));
      }
      out[f->name()] = std::move(list);
    } else if (f->cpp_type() !=
                   google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE ||
               r->HasField(m, f)) {
      if (f->containing_oneof() != nullptr && !r->HasField(m, f)) continue;
      out[f->name()] = FieldValue(m, f, 0);
    }
  }
  return out;
}

// request_id is ValidRequestId or hex: safe in a header.
void Send(mg_connection* conn, const Reply& reply,
          absl::string_view request_id) {
  std::string headers =
      absl::StrCat("HTTP/1.1 ", reply.status, " ",
                   mg_get_response_code_text(conn, reply.status),
                   "\r\nContent-Type: ", reply.content_type,
                   "\r\nContent-Length: ", reply.body.size(),
                   "\r\nX-Request-Id: ", request_id,
                   // Keep-alive is off: an unread body cannot confuse a
                   // next request.
                   "\r\nConnection: close\r\n");
  if (reply.header_length >= 0) {
    absl::StrAppend(&headers, kHeaderLength, ": ", reply.header_length, "\r\n");
  }
  headers += "\r\n";
  mg_write(conn, headers.data(), headers.size());
  const mg_request_info* info = mg_get_request_info(conn);
  if (std::strcmp(info->request_method, "HEAD") != 0) {
    mg_write(conn, reply.body.data(), reply.body.size());
  }
}

// Sends reply and writes the request's access-log line (access_log may be
// null).
void Answer(mg_connection* conn, const Reply& reply,
            absl::string_view request_id,
            std::chrono::steady_clock::time_point start,
            AccessLog* access_log) {
  Send(conn, reply, request_id);
  if (access_log == nullptr) return;
  const mg_request_info* info = mg_get_request_info(conn);
  AccessRecord line;
  line.request_id = std::string(request_id);
  line.method = absl::StrCat(info->request_method, " ", info->local_uri);
  // The status's name as a code: "Not Found" becomes NOT_FOUND.
  line.code = absl::AsciiStrToUpper(absl::StrReplaceAll(
      mg_get_response_code_text(conn, reply.status), {{" ", "_"}, {"-", "_"}}));
  line.http_status = reply.status;
  line.peer = absl::StrCat(info->remote_addr, ":", info->remote_port);
  line.request_bytes = std::max<int64_t>(0, info->content_length);
  line.response_bytes = static_cast<int64_t>(reply.body.size());
  line.duration_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  access_log->Write(line);
}

using Stub = inference::GRPCInferenceService::Stub;

// An unsigned integer member of a registration body into set; absent
// members are left alone (the service names what is missing).
absl::Status UnsignedIn(const json& j, const char* name,
                        const std::function<void(uint64_t)>& set) {
  const auto v = j.find(name);
  if (v == j.end()) return absl::OkStatus();
  if (!v->is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a non-negative integer"));
  }
  set(v->get<uint64_t>());
  return absl::OkStatus();
}

// The calls and messages of system shared memory, and its register body
// {"key", "offset", "byte_size"}.
struct SystemRegions {
  using StatusRequest = inference::SystemSharedMemoryStatusRequest;
  using StatusResponse = inference::SystemSharedMemoryStatusResponse;
  using RegisterRequest = inference::SystemSharedMemoryRegisterRequest;
  using RegisterResponse = inference::SystemSharedMemoryRegisterResponse;
  using UnregisterRequest = inference::SystemSharedMemoryUnregisterRequest;
  using UnregisterResponse = inference::SystemSharedMemoryUnregisterResponse;
  static constexpr auto kStatus = &Stub::SystemSharedMemoryStatus;
  static constexpr auto kRegister = &Stub::SystemSharedMemoryRegister;
  static constexpr auto kUnregister = &Stub::SystemSharedMemoryUnregister;
  static absl::Status Parse(const json& j, RegisterRequest* r) {
    if (const auto key = j.find("key"); key != j.end()) {
      if (!key->is_string()) {
        return absl::InvalidArgumentError("key: not a string");
      }
      r->set_key(key->get<std::string>());
    }
    COALESCE_RETURN_IF_ERROR(
        UnsignedIn(j, "offset", [r](uint64_t v) { r->set_offset(v); }));
    return UnsignedIn(j, "byte_size", [r](uint64_t v) { r->set_byte_size(v); });
  }
};

// The same for CUDA shared memory: {"raw_handle": {"b64": ...},
// "device_id", "byte_size"}, the handle base64 as Triton's HTTP clients
// send it.
struct CudaRegions {
  using StatusRequest = inference::CudaSharedMemoryStatusRequest;
  using StatusResponse = inference::CudaSharedMemoryStatusResponse;
  using RegisterRequest = inference::CudaSharedMemoryRegisterRequest;
  using RegisterResponse = inference::CudaSharedMemoryRegisterResponse;
  using UnregisterRequest = inference::CudaSharedMemoryUnregisterRequest;
  using UnregisterResponse = inference::CudaSharedMemoryUnregisterResponse;
  static constexpr auto kStatus = &Stub::CudaSharedMemoryStatus;
  static constexpr auto kRegister = &Stub::CudaSharedMemoryRegister;
  static constexpr auto kUnregister = &Stub::CudaSharedMemoryUnregister;
  static absl::Status Parse(const json& j, RegisterRequest* r) {
    if (const auto handle = j.find("raw_handle"); handle != j.end()) {
      const auto b64 =
          handle->is_object() ? handle->find("b64") : handle->end();
      std::string raw;
      if (b64 == handle->end() || !b64->is_string() ||
          !absl::Base64Unescape(b64->get<std::string>(), &raw)) {
        return absl::InvalidArgumentError(
            "raw_handle: not {\"b64\": BASE64 STRING}");
      }
      r->set_raw_handle(std::move(raw));
    }
    COALESCE_RETURN_IF_ERROR(UnsignedIn(j, "device_id", [r](uint64_t v) {
      r->set_device_id(static_cast<int64_t>(v));
    }));
    return UnsignedIn(j, "byte_size", [r](uint64_t v) { r->set_byte_size(v); });
  }
};

// /v2/{system,cuda}sharedmemory[/region/R]/{status,register,unregister},
// as the gRPC calls of the same names: registration needs the local
// socket's peer credentials, so over HTTP it is refused with the service's
// own message; status and unregister serve the caller's regions.
template <typename Kind>
Reply SharedMemory(Stub* stub, mg_connection* conn,
                   grpc::ClientContext* context,
                   const std::vector<absl::string_view>& path,
                   absl::string_view method) {
  std::string region;
  absl::string_view action;
  if (path.size() == 2) {
    action = path[1];
  } else if (path.size() == 4 && path[1] == "region") {
    region = std::string(path[2]);
    action = path[3];
  } else {
    return ErrorReply(404, "no such shared-memory endpoint");
  }
  if (action == "status") {
    if (method != "GET") return ErrorReply(405, "GET only");
    typename Kind::StatusRequest request;
    request.set_name(region);
    typename Kind::StatusResponse response;
    const grpc::Status s = (stub->*Kind::kStatus)(context, request, &response);
    if (!s.ok()) return StatusReply(s);
    json regions = json::array();
    for (const auto& [name, r] : response.regions()) {
      regions.push_back(ProtoJson(r));
    }
    return JsonReply(200, regions);
  }
  if (method != "POST") return ErrorReply(405, "POST only");
  if (action == "unregister") {
    typename Kind::UnregisterRequest request;
    request.set_name(region);
    typename Kind::UnregisterResponse response;
    const grpc::Status s =
        (stub->*Kind::kUnregister)(context, request, &response);
    return s.ok() ? JsonReply(200, json::object()) : StatusReply(s);
  }
  if (action != "register" || region.empty()) {
    return ErrorReply(404, "no such shared-memory endpoint");
  }
  absl::StatusOr<std::string> body = ReadBody(conn, kMaxSmallBody);
  if (!body.ok()) return BodyErrorReply(body.status());
  const json j = json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return ErrorReply(400, "body: not a JSON object");
  typename Kind::RegisterRequest request;
  request.set_name(region);
  if (const absl::Status parsed = Kind::Parse(j, &request); !parsed.ok()) {
    return StatusReply(parsed);
  }
  typename Kind::RegisterResponse response;
  const grpc::Status s = (stub->*Kind::kRegister)(context, request, &response);
  return s.ok() ? JsonReply(200, json::object()) : StatusReply(s);
}

}  // namespace

RestServer::RestServer(std::shared_ptr<grpc::Channel> channel,
                       int64_t max_body_bytes, AccessLog* access_log)
    : channel_(std::move(channel)),
      stub_(inference::GRPCInferenceService::NewStub(channel_)),
      max_body_bytes_(max_body_bytes),
      access_log_(access_log) {}

absl::StatusOr<std::unique_ptr<RestServer>> RestServer::Start(
    absl::string_view address, std::shared_ptr<grpc::Channel> channel,
    int64_t max_body_bytes, AccessLog* access_log) {
  COALESCE_ASSIGN_OR_RETURN(
      const metrics::CivetwebListener listener,
      metrics::StartCivetweb(address, "HTTP", kWorkers, kRequestTimeoutMs,
                             LogMessage));
  auto server = std::unique_ptr<RestServer>(
      new RestServer(std::move(channel), max_body_bytes, access_log));
  server->context_ = listener.context;
  server->port_ = listener.port;
  mg_set_request_handler(server->context_, "/v2", &RestServer::Handle,
                         server.get());
  return server;
}

RestServer::~RestServer() {
  if (context_ != nullptr) mg_stop(context_);
}

int RestServer::Handle(mg_connection* conn, void* data) {
  auto* self = static_cast<RestServer*>(data);
  const auto start = std::chrono::steady_clock::now();
  const mg_request_info* info = mg_get_request_info(conn);
  const auto header = [conn](const char* name) {
    const char* value = mg_get_header(conn, name);
    return value == nullptr ? absl::string_view() : absl::string_view(value);
  };
  const std::string request_id =
      ResolveRequestId(header("X-Request-Id"), header("traceparent"));
  Reply reply;
  try {
    const absl::string_view method = info->request_method;
    const std::vector<absl::string_view> path = absl::StrSplit(
        absl::string_view(info->local_uri).substr(3), '/', absl::SkipEmpty());
    const bool get = method == "GET" || method == "HEAD";
    grpc::ClientContext context;
    // The gRPC calls it becomes log under the same id.
    context.AddMetadata(kRequestIdKey, request_id);
    if (absl::Status s = Forward(conn, &context); !s.ok()) {
      reply = StatusReply(s);
      Answer(conn, reply, request_id, start, self->access_log_);
      return reply.status;
    }
    // /v2/models/M[/versions/V]/...: the model, its version and the rest.
    std::string model, version;
    std::vector<absl::string_view> rest;
    // /v2/models/stats: every model's statistics, not a model "stats".
    const bool all_stats =
        path.size() == 2 && path[0] == "models" && path[1] == "stats";
    if (path.size() >= 2 && path[0] == "models" && !all_stats) {
      model = std::string(path[1]);
      size_t at = 2;
      if (path.size() >= 4 && path[2] == "versions") {
        version = std::string(path[3]);
        at = 4;
      }
      rest.assign(path.begin() + at, path.end());
    }
    if (path.empty()) {
      if (!get) {
        reply = ErrorReply(405, "GET only");
      } else {
        inference::ServerMetadataResponse response;
        const grpc::Status s =
            self->stub_->ServerMetadata(&context, {}, &response);
        reply = !s.ok() ? StatusReply(s)
                        : JsonReply(200, {{"name", response.name()},
                                          {"version", response.version()},
                                          {"extensions",
                                           std::vector<std::string>(
                                               response.extensions().begin(),
                                               response.extensions().end())}});
      }
    } else if (path.size() == 2 && path[0] == "health" &&
               (path[1] == "live" || path[1] == "ready")) {
      bool yes = false;
      grpc::Status s;
      if (path[1] == "live") {
        inference::ServerLiveResponse response;
        s = self->stub_->ServerLive(&context, {}, &response);
        yes = response.live();
      } else {
        inference::ServerReadyResponse response;
        s = self->stub_->ServerReady(&context, {}, &response);
        yes = response.ready();
      }
      // The protocol's answer is the status alone: 200 true, 4xx false.
      reply = !s.ok() ? StatusReply(s)
              : yes   ? Reply{200, "application/json", "", -1}
                      : Reply{400, "application/json", "", -1};
      if (!get) reply = ErrorReply(405, "GET only");
    } else if (!model.empty() && rest.empty()) {
      if (!get) {
        reply = ErrorReply(405, "GET only");
      } else {
        inference::ModelMetadataRequest request;
        request.set_name(model);
        request.set_version(version);
        inference::ModelMetadataResponse response;
        const grpc::Status s =
            self->stub_->ModelMetadata(&context, request, &response);
        reply = !s.ok()
                    ? StatusReply(s)
                    : JsonReply(200,
                                {{"name", response.name()},
                                 {"versions", std::vector<std::string>(
                                                  response.versions().begin(),
                                                  response.versions().end())},
                                 {"platform", response.platform()},
                                 {"inputs", TensorsJson(response.inputs())},
                                 {"outputs", TensorsJson(response.outputs())}});
      }
    } else if (!model.empty() && rest.size() == 1 && rest[0] == "ready") {
      if (!get) {
        reply = ErrorReply(405, "GET only");
      } else {
        inference::ModelReadyRequest request;
        request.set_name(model);
        request.set_version(version);
        inference::ModelReadyResponse response;
        const grpc::Status s =
            self->stub_->ModelReady(&context, request, &response);
        reply = !s.ok()            ? StatusReply(s)
                : response.ready() ? Reply{200, "application/json", "", -1}
                                   : Reply{400, "application/json", "", -1};
      }
    } else if (!model.empty() && rest.size() == 1 && rest[0] == "config") {
      if (!get) {
        reply = ErrorReply(405, "GET only");
      } else {
        inference::ModelConfigRequest request;
        request.set_name(model);
        request.set_version(version);
        inference::ModelConfigResponse response;
        const grpc::Status s =
            self->stub_->ModelConfig(&context, request, &response);
        // Triton answers the config itself, not {"config": ...}.
        reply = s.ok() ? JsonReply(200, ProtoJson(response.config()))
                       : StatusReply(s);
      }
    } else if (all_stats ||
               (!model.empty() && rest.size() == 1 && rest[0] == "stats")) {
      if (!get) {
        reply = ErrorReply(405, "GET only");
      } else {
        inference::ModelStatisticsRequest request;
        request.set_name(model);
        request.set_version(version);
        inference::ModelStatisticsResponse response;
        const grpc::Status s =
            self->stub_->ModelStatistics(&context, request, &response);
        reply = s.ok() ? JsonReply(200, ProtoJson(response)) : StatusReply(s);
      }
    } else if (path.size() == 2 && path[0] == "repository" &&
               path[1] == "index") {
      if (method != "POST") {
        reply = ErrorReply(405, "POST only");
      } else {
        absl::StatusOr<std::string> body = ReadBody(conn, kMaxSmallBody);
        inference::RepositoryIndexRequest request;
        absl::Status parsed;
        if (body.ok() && !body->empty()) {
          const json j =
              json::parse(*body, nullptr, /*allow_exceptions=*/false);
          if (!j.is_object()) {
            parsed = absl::InvalidArgumentError("body: not a JSON object");
          } else if (std::optional<bool> ready = BoolIn(j, "ready")) {
            request.set_ready(*ready);
          }
        }
        inference::RepositoryIndexResponse response;
        grpc::Status s;
        if (body.ok() && parsed.ok()) {
          s = self->stub_->RepositoryIndex(&context, request, &response);
        }
        reply = !body.ok()     ? BodyErrorReply(body.status())
                : !parsed.ok() ? StatusReply(parsed)
                : s.ok()       ? JsonReply(200, ProtoJson(response).value(
                                                    "models", json::array()))
                               : StatusReply(s);
      }
    } else if (!path.empty() && path[0] == "systemsharedmemory") {
      reply = SharedMemory<SystemRegions>(self->stub_.get(), conn, &context,
                                          path, method);
    } else if (!path.empty() && path[0] == "cudasharedmemory") {
      reply = SharedMemory<CudaRegions>(self->stub_.get(), conn, &context, path,
                                        method);
    } else if (!model.empty() && rest.size() == 1 && rest[0] == "infer") {
      if (method != "POST") {
        reply = ErrorReply(405, "POST only");
      } else {
        absl::StatusOr<std::string> body =
            ReadBody(conn, self->max_body_bytes_);
        if (!body.ok()) {
          reply = BodyErrorReply(body.status());
        } else {
          int64_t header_length = static_cast<int64_t>(body->size());
          absl::Status parsed;
          if (const char* h = mg_get_header(conn, kHeaderLength)) {
            if (!absl::SimpleAtoi(h, &header_length) || header_length < 0 ||
                header_length > static_cast<int64_t>(body->size())) {
              parsed = absl::InvalidArgumentError(absl::StrCat(
                  kHeaderLength, ": not a length within the body's ",
                  body->size(), " bytes"));
            }
          }
          ModelInferRequest request;
          request.set_model_name(model);
          request.set_model_version(version);
          OutputEncoding encoding;
          if (parsed.ok()) {
            parsed = ParseInfer(*body, header_length, &request, &encoding);
          }
          // The body's bytes now live in the request.
          body->clear();
          body->shrink_to_fit();
          if (!parsed.ok()) {
            reply = StatusReply(parsed);
          } else {
            ModelInferResponse response;
            const grpc::Status s =
                self->stub_->ModelInfer(&context, request, &response);
            reply = s.ok() ? InferReply(response, encoding)
                           : StatusReply(InRestFields(s, encoding));
          }
        }
      }
    } else {
      reply = ErrorReply(404, absl::StrCat("no endpoint ", info->local_uri));
    }
  } catch (const std::exception& e) {
    // A JSON value of an unexpected kind, or memory: the request fails,
    // never the server.
    reply = ErrorReply(500, absl::StrCat("internal error: ", e.what()));
  }
  Answer(conn, reply, request_id, start, self->access_log_);
  return reply.status;
}

}  // namespace coalesce
