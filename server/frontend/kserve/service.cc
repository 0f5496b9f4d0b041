#include "server/frontend/kserve/service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/quote.h"
#include "base/shape.h"
#include "base/status_macros.h"
#include "server/frontend/rpc_call.h"
#include "server/frontend/status.h"

namespace coalesce {
namespace {

using inference::InferParameter;
using inference::InferTensorContents;
using inference::ModelInferRequest;
using inference::ModelInferResponse;

constexpr absl::string_view kInput = "INPUT0";
constexpr absl::string_view kOutput = "OUTPUT0";

// The protocol's datatypes and their element sizes (0: BYTES, whose
// elements have no fixed size).
struct Datatype {
  absl::string_view name;
  int bytes;
};
constexpr Datatype kDatatypes[] = {
    {"BOOL", 1}, {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4}, {"UINT64", 8},
    {"INT8", 1}, {"INT16", 2}, {"INT32", 4},  {"INT64", 8},  {"FP16", 2},
    {"FP32", 4}, {"FP64", 8},  {"BF16", 2},   {"BYTES", 0},
};

absl::StatusOr<int> ElementBytes(absl::string_view datatype,
                                 absl::string_view field) {
  for (const Datatype& d : kDatatypes) {
    if (d.name == datatype) return d.bytes;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": unknown datatype ", Quoted(datatype)));
}

// The native dtype of an input of model (FP32, FP16 or BF16).
absl::StatusOr<v1::DataType> NativeDType(absl::string_view datatype,
                                         absl::string_view field,
                                         absl::string_view model) {
  COALESCE_RETURN_IF_ERROR(ElementBytes(datatype, field).status());
  if (datatype == "FP32") return v1::DATA_TYPE_FLOAT32;
  if (datatype == "FP16") return v1::DATA_TYPE_FLOAT16;
  if (datatype == "BF16") return v1::DATA_TYPE_BFLOAT16;
  return absl::InvalidArgumentError(absl::StrCat(field, ": model ",
                                                 Quoted(model),
                                                 " takes FP32, FP16 or BF16, "
                                                 "got ",
                                                 Quoted(datatype)));
}

// The protocol's name of a native output's dtype.
absl::string_view KServeDatatype(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_FLOAT16:
      return "FP16";
    case v1::DATA_TYPE_BFLOAT16:
      return "BF16";
    default:
      return "FP32";
  }
}

// A model's tensor: its name in the protocol and in the native request or
// response (the field of type v1::Tensor), whether an input must be given,
// and the rank ModelMetadata advertises (every dimension -1).
struct TensorSpec {
  absl::string_view name;
  absl::string_view native;
  bool required;
  int rank;
};

// A protocol parameter's native field, for the native codec's errors.
struct ParameterRename {
  absl::string_view native;
  absl::string_view name;
};

// Runs a native request through ops: the Run* wrapper of its op.
using NativeRun = void (*)(TensorOpsService* ops,
                           grpc::CallbackServerContext* context,
                           absl::StatusOr<Caller> caller,
                           const google::protobuf::Message* request,
                           google::protobuf::Message* response,
                           std::function<void(grpc::Status)> done);
// Sets the native request's fields from the request's parameters.
using ParametersToNative = absl::Status (*)(const ModelInferRequest& request,
                                            google::protobuf::Message* native);

// A served model. identity has no native op (run is null).
struct ModelSpec {
  absl::string_view name;
  absl::Span<const TensorSpec> inputs;
  absl::Span<const TensorSpec> outputs;
  absl::Span<const ParameterRename> renames;
  std::unique_ptr<google::protobuf::Message> (*new_request)();
  std::unique_ptr<google::protobuf::Message> (*new_response)();
  NativeRun run;
  ParametersToNative parameters;
};

template <typename M>
std::unique_ptr<google::protobuf::Message> New() {
  return std::make_unique<M>();
}

template <typename Request, typename Response,
          void (TensorOpsService::*kRun)(
              grpc::CallbackServerContext*, absl::StatusOr<Caller>,
              const Request*, Response*, std::function<void(grpc::Status)>)>
void RunAs(TensorOpsService* ops, grpc::CallbackServerContext* context,
           absl::StatusOr<Caller> caller,
           const google::protobuf::Message* request,
           google::protobuf::Message* response,
           std::function<void(grpc::Status)> done) {
  (ops->*kRun)(context, std::move(caller), static_cast<const Request*>(request),
               static_cast<Response*>(response), std::move(done));
}

// The request's parameter name; null when not given.
const InferParameter* FindParameter(const ModelInferRequest& r,
                                    absl::string_view name) {
  const auto it = r.parameters().find(std::string(name));
  return it == r.parameters().end() ? nullptr : &it->second;
}
// The typed parameters below: nullopt when not given, INVALID_ARGUMENT
// naming the parameter when it is of another kind.
absl::Status WrongKind(absl::string_view name, absl::string_view kind) {
  return absl::InvalidArgumentError(
      absl::StrCat("parameters.", name, ": must be a ", kind));
}
absl::StatusOr<std::optional<std::string>> StringParameter(
    const ModelInferRequest& r, absl::string_view name) {
  const InferParameter* p = FindParameter(r, name);
  if (p == nullptr) return std::nullopt;
  if (p->parameter_choice_case() != InferParameter::kStringParam) {
    return WrongKind(name, "string_param");
  }
  return p->string_param();
}
absl::StatusOr<std::optional<bool>> BoolParameter(const ModelInferRequest& r,
                                                  absl::string_view name) {
  const InferParameter* p = FindParameter(r, name);
  if (p == nullptr) return std::nullopt;
  if (p->parameter_choice_case() != InferParameter::kBoolParam) {
    return WrongKind(name, "bool_param");
  }
  return p->bool_param();
}
absl::StatusOr<std::optional<int64_t>> Int64Parameter(
    const ModelInferRequest& r, absl::string_view name) {
  const InferParameter* p = FindParameter(r, name);
  if (p == nullptr) return std::nullopt;
  if (p->parameter_choice_case() != InferParameter::kInt64Param) {
    return WrongKind(name, "int64_param");
  }
  return p->int64_param();
}
// A double_param, an int64_param (a client's "1" for 1.0), or a
// string_param holding a number: older tritonclient releases send no
// double_param, so a fraction comes from them as a string.
absl::StatusOr<std::optional<double>> DoubleParameter(
    const ModelInferRequest& r, absl::string_view name) {
  const InferParameter* p = FindParameter(r, name);
  if (p == nullptr) return std::nullopt;
  if (p->parameter_choice_case() == InferParameter::kDoubleParam) {
    return p->double_param();
  }
  if (p->parameter_choice_case() == InferParameter::kInt64Param) {
    return static_cast<double>(p->int64_param());
  }
  double value = 0;
  if (p->parameter_choice_case() == InferParameter::kStringParam &&
      absl::SimpleAtod(p->string_param(), &value) && std::isfinite(value)) {
    return value;
  }
  return WrongKind(name, "double_param (or a number as a string_param)");
}

// "variant" and "report", every native model's: the native options.
absl::Status OptionsToNative(const ModelInferRequest& r,
                             v1::ExecutionOptions* options) {
  COALESCE_ASSIGN_OR_RETURN(const std::optional<std::string> variant,
                            StringParameter(r, "variant"));
  if (variant.has_value()) options->set_variant(*variant);
  COALESCE_ASSIGN_OR_RETURN(const std::optional<bool> report,
                            BoolParameter(r, "report"));
  if (report.has_value()) options->set_report(*report);
  return absl::OkStatus();
}

absl::Status NoParameters(const ModelInferRequest&,
                          google::protobuf::Message*) {
  return absl::OkStatus();
}

// layout_from or layout_to, which the other needs.
absl::StatusOr<v1::Layout> LayoutParameter(const ModelInferRequest& r,
                                           absl::string_view name) {
  COALESCE_ASSIGN_OR_RETURN(const std::optional<std::string> value,
                            StringParameter(r, name));
  if (!value.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameters.", name, ": required with ",
                     name == "layout_from" ? "layout_to" : "layout_from"));
  }
  // Any case: perf_analyzer's --request-parameter lowercases its values.
  if (absl::EqualsIgnoreCase(*value, "NCHW")) return v1::LAYOUT_NCHW;
  if (absl::EqualsIgnoreCase(*value, "NHWC")) return v1::LAYOUT_NHWC;
  return absl::InvalidArgumentError(
      absl::StrCat("parameters.", name, ": must be \"NCHW\" or \"NHWC\", got ",
                   Quoted(*value)));
}

// convert_layout's conversion: exactly one of layout_from with layout_to,
// permutation, or aos_soa (with fields, optional).
absl::Status ConvertLayoutParameters(const ModelInferRequest& r,
                                     google::protobuf::Message* message) {
  auto* native = static_cast<v1::ConvertLayoutRequest*>(message);
  const bool layouts = FindParameter(r, "layout_from") != nullptr ||
                       FindParameter(r, "layout_to") != nullptr;
  const bool permutation = FindParameter(r, "permutation") != nullptr;
  const bool aos_soa = FindParameter(r, "aos_soa") != nullptr;
  const int given = layouts + permutation + aos_soa;
  if (given != 1) {
    // Named: the first missing choice, or the second one given.
    const absl::string_view name = given == 0               ? "layout_from"
                                   : layouts && permutation ? "permutation"
                                                            : "aos_soa";
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters.", name, given == 0 ? ": missing" : ": conflicts",
        "; model 'convert_layout' takes exactly one of layout_from with "
        "layout_to, permutation, or aos_soa (with fields)"));
  }
  if (FindParameter(r, "fields") != nullptr && !aos_soa) {
    return absl::InvalidArgumentError(
        "parameters.fields: only with parameters.aos_soa");
  }
  if (layouts) {
    v1::LayoutPair* pair = native->mutable_layouts();
    COALESCE_ASSIGN_OR_RETURN(const v1::Layout from,
                              LayoutParameter(r, "layout_from"));
    COALESCE_ASSIGN_OR_RETURN(const v1::Layout to,
                              LayoutParameter(r, "layout_to"));
    pair->set_from(from);
    pair->set_to(to);
  } else if (permutation) {
    COALESCE_ASSIGN_OR_RETURN(const std::optional<std::string> value,
                              StringParameter(r, "permutation"));
    v1::Permutation* perm = native->mutable_permutation();
    for (absl::string_view part : absl::StrSplit(*value, ',')) {
      int p = 0;
      if (!absl::SimpleAtoi(part, &p)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameters.permutation: ", Quoted(*value),
            " is not a comma-separated list of integers (\"0,2,3,1\")"));
      }
      perm->add_perm(p);
    }
  } else {
    COALESCE_ASSIGN_OR_RETURN(const std::optional<std::string> value,
                              StringParameter(r, "aos_soa"));
    v1::AosSoa* a = native->mutable_aos_soa();
    if (*value == "aos_to_soa") {
      a->set_direction(v1::AosSoa::DIRECTION_AOS_TO_SOA);
    } else if (*value == "soa_to_aos") {
      a->set_direction(v1::AosSoa::DIRECTION_SOA_TO_AOS);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameters.aos_soa: must be \"aos_to_soa\" or \"soa_to_aos\", "
          "got ",
          Quoted(*value)));
    }
    COALESCE_ASSIGN_OR_RETURN(const std::optional<int64_t> fields,
                              Int64Parameter(r, "fields"));
    if (fields.has_value()) {
      if (*fields < 0 || *fields > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameters.fields: must be in [0, 2^31), got ", *fields));
      }
      a->set_fields(static_cast<int32_t>(*fields));
    }
  }
  return absl::OkStatus();
}

absl::Status GeluLayerNormParameters(const ModelInferRequest& r,
                                     google::protobuf::Message* message) {
  auto* native = static_cast<v1::GeluLayerNormRequest*>(message);
  COALESCE_ASSIGN_OR_RETURN(const std::optional<double> epsilon,
                            DoubleParameter(r, "epsilon"));
  if (epsilon.has_value()) native->set_epsilon(static_cast<float>(*epsilon));
  COALESCE_ASSIGN_OR_RETURN(const std::optional<std::string> approximation,
                            StringParameter(r, "approximation"));
  if (approximation.has_value()) {
    if (*approximation == "none") {
      native->set_approximation(v1::GELU_APPROXIMATION_NONE);
    } else if (*approximation == "tanh") {
      native->set_approximation(v1::GELU_APPROXIMATION_TANH);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("parameters.approximation: must be \"none\" or "
                       "\"tanh\", got ",
                       Quoted(*approximation)));
    }
  }
  COALESCE_ASSIGN_OR_RETURN(const std::optional<bool> pre_norm,
                            BoolParameter(r, "return_pre_norm"));
  // Asking for output h is asking for it to be computed.
  const bool h_requested = absl::c_any_of(
      r.outputs(), [](const auto& o) { return o.name() == "h"; });
  if (h_requested && pre_norm == false) {
    return absl::InvalidArgumentError(
        "parameters.return_pre_norm: false, but outputs asks for h");
  }
  native->set_return_pre_norm(pre_norm.value_or(h_requested));
  return absl::OkStatus();
}

absl::Status GemmParameters(const ModelInferRequest& r,
                            google::protobuf::Message* message) {
  auto* native = static_cast<v1::GemmRequest*>(message);
  COALESCE_ASSIGN_OR_RETURN(const std::optional<double> alpha,
                            DoubleParameter(r, "alpha"));
  if (alpha.has_value()) native->set_alpha(static_cast<float>(*alpha));
  COALESCE_ASSIGN_OR_RETURN(const std::optional<double> beta,
                            DoubleParameter(r, "beta"));
  if (beta.has_value()) native->set_beta(static_cast<float>(*beta));
  COALESCE_ASSIGN_OR_RETURN(const std::optional<bool> trans_a,
                            BoolParameter(r, "trans_a"));
  native->set_trans_a(trans_a.value_or(false));
  COALESCE_ASSIGN_OR_RETURN(const std::optional<bool> trans_b,
                            BoolParameter(r, "trans_b"));
  native->set_trans_b(trans_b.value_or(false));
  COALESCE_ASSIGN_OR_RETURN(const std::optional<bool> tf32,
                            BoolParameter(r, "allow_tf32"));
  native->set_allow_tf32(tf32.value_or(false));
  return absl::OkStatus();
}

constexpr TensorSpec kIdentityInputs[] = {{"INPUT0", "", true, 1}};
constexpr TensorSpec kIdentityOutputs[] = {{"OUTPUT0", "", true, 1}};
constexpr TensorSpec kTransposeInputs[] = {{"INPUT0", "input", true, 2}};
constexpr TensorSpec kTransposeOutputs[] = {{"OUTPUT0", "output", true, 2}};
constexpr TensorSpec kConvertLayoutInputs[] = {{"INPUT0", "input", true, 4}};
constexpr TensorSpec kConvertLayoutOutputs[] = {{"OUTPUT0", "output", true, 4}};
constexpr ParameterRename kConvertLayoutRenames[] = {
    {"layouts.from", "parameters.layout_from"},
    {"layouts.to", "parameters.layout_to"},
    {"layouts", "parameters.layout_from"},
    {"permutation.perm", "parameters.permutation"},
    {"aos_soa.direction", "parameters.aos_soa"},
    {"aos_soa.fields", "parameters.fields"},
    {"conversion", "parameters"},
};
constexpr TensorSpec kGeluLayerNormInputs[] = {
    {"x", "x", true, 2},
    {"bias", "bias", false, 1},
    {"residual", "residual", false, 2},
    {"gamma", "gamma", false, 1},
    {"beta", "beta", false, 1},
};
constexpr TensorSpec kGeluLayerNormOutputs[] = {{"y", "y", true, 2},
                                                {"h", "h", false, 2}};
constexpr ParameterRename kGeluLayerNormRenames[] = {
    {"epsilon", "parameters.epsilon"},
    {"approximation", "parameters.approximation"},
};
constexpr TensorSpec kGemmInputs[] = {
    {"a", "a", true, 2}, {"b", "b", true, 2}, {"c", "c", false, 2}};
constexpr TensorSpec kGemmOutputs[] = {{"d", "d", true, 2}};
constexpr ParameterRename kGemmRenames[] = {
    {"alpha", "parameters.alpha"},
    {"beta", "parameters.beta"},
};

const ModelSpec kModels[] = {
    {InferenceService::kIdentity,
     kIdentityInputs,
     kIdentityOutputs,
     {},
     nullptr,
     nullptr,
     nullptr,
     nullptr},
    {InferenceService::kTranspose,
     kTransposeInputs,
     kTransposeOutputs,
     {},
     &New<v1::TransposeRequest>,
     &New<v1::TransposeResponse>,
     &RunAs<v1::TransposeRequest, v1::TransposeResponse,
            &TensorOpsService::RunTranspose>,
     &NoParameters},
    {InferenceService::kConvertLayout, kConvertLayoutInputs,
     kConvertLayoutOutputs, kConvertLayoutRenames,
     &New<v1::ConvertLayoutRequest>, &New<v1::ConvertLayoutResponse>,
     &RunAs<v1::ConvertLayoutRequest, v1::ConvertLayoutResponse,
            &TensorOpsService::RunConvertLayout>,
     &ConvertLayoutParameters},
    {InferenceService::kGeluLayerNorm, kGeluLayerNormInputs,
     kGeluLayerNormOutputs, kGeluLayerNormRenames,
     &New<v1::GeluLayerNormRequest>, &New<v1::GeluLayerNormResponse>,
     &RunAs<v1::GeluLayerNormRequest, v1::GeluLayerNormResponse,
            &TensorOpsService::RunGeluLayerNorm>,
     &GeluLayerNormParameters},
    {InferenceService::kGemm, kGemmInputs, kGemmOutputs, kGemmRenames,
     &New<v1::GemmRequest>, &New<v1::GemmResponse>,
     &RunAs<v1::GemmRequest, v1::GemmResponse, &TensorOpsService::RunGemm>,
     &GemmParameters},
};

const ModelSpec* FindModel(absl::string_view name) {
  for (const ModelSpec& m : kModels) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

// NOT_FOUND naming the field unless name is a served model and version is
// empty (the server's choice) or the served one.
absl::StatusOr<const ModelSpec*> CheckModel(absl::string_view name,
                                            absl::string_view name_field,
                                            absl::string_view version,
                                            absl::string_view version_field) {
  const ModelSpec* model = FindModel(name);
  if (model == nullptr) {
    std::string served;
    for (const ModelSpec& m : kModels) {
      absl::StrAppend(&served, served.empty() ? "" : ", ", m.name);
    }
    return absl::NotFoundError(absl::StrCat(name_field, ": unknown model ",
                                            Quoted(name), " (served: ", served,
                                            ")"));
  }
  if (!version.empty() && version != InferenceService::kVersion) {
    return absl::NotFoundError(absl::StrCat(
        version_field, ": model ", Quoted(name), " has no version ",
        Quoted(version), " (served: \"", InferenceService::kVersion, "\")"));
  }
  return model;
}

// The element count of shape; INVALID_ARGUMENT naming the dimension for a
// negative one, or when the count (times 8 bytes) leaves int64.
absl::StatusOr<int64_t> Elements(absl::Span<const int64_t> shape,
                                 absl::string_view field) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape[", i, "]: must be >= 0, got ", shape[i]));
    }
    if (shape[i] > 0 &&
        n > std::numeric_limits<int64_t>::max() / 8 / shape[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".shape: ", ShapeString(shape), " has too many elements"));
    }
    n *= shape[i];
  }
  return n;
}

bool HasContents(const InferTensorContents& c) {
  return c.bool_contents_size() > 0 || c.int_contents_size() > 0 ||
         c.int64_contents_size() > 0 || c.uint_contents_size() > 0 ||
         c.uint64_contents_size() > 0 || c.fp32_contents_size() > 0 ||
         c.fp64_contents_size() > 0 || c.bytes_contents_size() > 0;
}

// The elements in the typed field that carries datatype; -1 for FP16 and
// BF16, which have none.
int64_t ContentsCount(const InferTensorContents& c,
                      absl::string_view datatype) {
  if (datatype == "BOOL") return c.bool_contents_size();
  if (datatype == "INT8" || datatype == "INT16" || datatype == "INT32") {
    return c.int_contents_size();
  }
  if (datatype == "INT64") return c.int64_contents_size();
  if (datatype == "UINT8" || datatype == "UINT16" || datatype == "UINT32") {
    return c.uint_contents_size();
  }
  if (datatype == "UINT64") return c.uint64_contents_size();
  if (datatype == "FP32") return c.fp32_contents_size();
  if (datatype == "FP64") return c.fp64_contents_size();
  if (datatype == "BYTES") return c.bytes_contents_size();
  return -1;
}

using ParameterMap = google::protobuf::Map<std::string, InferParameter>;

// A tensor's bytes in a registered system shared-memory region, named by
// the Triton parameters shared_memory_region, shared_memory_byte_size and
// shared_memory_offset.
struct ShmParams {
  std::string region;
  uint64_t byte_size = 0;
  uint64_t offset = 0;
};

// A tensor's shared-memory parameters; nullopt when it names no region.
// INVALID_ARGUMENT naming "<field>.parameters.<name>" for a parameter of
// another kind, a negative size or offset, a region without a size, or a
// size or offset without a region.
absl::StatusOr<std::optional<ShmParams>> SharedMemoryParameters(
    const ParameterMap& params, absl::string_view field) {
  const auto find = [&](absl::string_view name) -> const InferParameter* {
    const auto it = params.find(std::string(name));
    return it == params.end() ? nullptr : &it->second;
  };
  const auto size =
      [&](absl::string_view name) -> absl::StatusOr<std::optional<uint64_t>> {
    const InferParameter* p = find(name);
    if (p == nullptr) return std::nullopt;
    if (p->parameter_choice_case() == InferParameter::kUint64Param) {
      return p->uint64_param();
    }
    if (p->parameter_choice_case() != InferParameter::kInt64Param) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".parameters.", name, ": must be an int64_param"));
    }
    if (p->int64_param() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".parameters.", name, ": must be >= 0, got ",
                       p->int64_param()));
    }
    return static_cast<uint64_t>(p->int64_param());
  };
  COALESCE_ASSIGN_OR_RETURN(const std::optional<uint64_t> byte_size,
                            size("shared_memory_byte_size"));
  COALESCE_ASSIGN_OR_RETURN(const std::optional<uint64_t> offset,
                            size("shared_memory_offset"));
  const InferParameter* region = find("shared_memory_region");
  if (region == nullptr) {
    if (byte_size.has_value() || offset.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".parameters.",
                       byte_size.has_value() ? "shared_memory_byte_size"
                                             : "shared_memory_offset",
                       ": only with shared_memory_region"));
    }
    return std::nullopt;
  }
  if (region->parameter_choice_case() != InferParameter::kStringParam ||
      region->string_param().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     ".parameters.shared_memory_region: must be a non-empty "
                     "string_param"));
  }
  if (!byte_size.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     ".parameters.shared_memory_byte_size: required with "
                     "shared_memory_region"));
  }
  return ShmParams{region->string_param(), *byte_size, offset.value_or(0)};
}

// Whether input i's data is in shared memory (then raw_input_contents has
// no entry for it, as Triton's clients send it).
bool InSharedMemory(const ModelInferRequest& r, int i) {
  return r.inputs(i).parameters().contains("shared_memory_region");
}

// Input i's entry in raw_input_contents: one per input not in shared
// memory, in order.
int RawIndex(const ModelInferRequest& r, int i) {
  int k = 0;
  for (int j = 0; j < i; ++j) k += InSharedMemory(r, j) ? 0 : 1;
  return k;
}

// Checks the request's tensors against model's and returns each model
// input's index in the request (-1: an optional one not given): every
// input is one of the model's (once), the required ones are given,
// raw_input_contents has one entry per input or none, every requested
// output is one of the model's.
absl::StatusOr<std::vector<int>> FindInputs(const ModelInferRequest& r,
                                            const ModelSpec& model) {
  std::vector<int> found(model.inputs.size(), -1);
  const auto names = [](absl::Span<const TensorSpec> tensors) {
    std::string s;
    for (const TensorSpec& t : tensors) {
      absl::StrAppend(&s, s.empty() ? "" : ", ", t.name);
    }
    return s;
  };
  for (int i = 0; i < r.inputs_size(); ++i) {
    const std::string field = absl::StrCat("inputs[", i, "].name");
    size_t k = 0;
    while (k < model.inputs.size() &&
           model.inputs[k].name != r.inputs(i).name()) {
      ++k;
    }
    if (k == model.inputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": unknown input ", Quoted(r.inputs(i).name()), "; model ",
          Quoted(r.model_name()), " takes ", names(model.inputs)));
    }
    if (found[k] >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", model.inputs[k].name, " is also inputs[",
                       found[k], "]"));
    }
    found[k] = i;
  }
  for (size_t k = 0; k < model.inputs.size(); ++k) {
    if (found[k] < 0 && model.inputs[k].required) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs: missing input ", model.inputs[k].name));
    }
  }
  int not_shared = 0;
  for (int i = 0; i < r.inputs_size(); ++i) {
    not_shared += InSharedMemory(r, i) ? 0 : 1;
  }
  if (r.raw_input_contents_size() > 0 &&
      r.raw_input_contents_size() != not_shared) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents: ", r.raw_input_contents_size(), " entries for ",
        not_shared,
        " inputs not in shared memory (give one per such input, or none)"));
  }
  for (int i = 0; i < r.outputs_size(); ++i) {
    const bool known = absl::c_any_of(model.outputs, [&](const TensorSpec& t) {
      return t.name == r.outputs(i).name();
    });
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].name: unknown output ", Quoted(r.outputs(i).name()),
          "; model ", Quoted(r.model_name()), " has ", names(model.outputs)));
    }
  }
  return found;
}

// Checks that input i's data is where and as large as its datatype and
// shape say: in shared memory with no typed contents (the region's range is
// checked where it is used), raw_input_contents[RawIndex] of exactly the
// size (unless BYTES) with no typed contents, or else the typed contents of
// the right count.
absl::Status CheckInputData(const ModelInferRequest& r, int i,
                            int element_bytes, int64_t elements) {
  const ModelInferRequest::InferInputTensor& in = r.inputs(i);
  const std::string field = absl::StrCat("inputs[", i, "]");
  if (InSharedMemory(r, i)) {
    if (HasContents(in.contents())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field,
                       ".contents: must be empty when the input is in shared "
                       "memory"));
    }
    return absl::OkStatus();
  }
  if (r.raw_input_contents_size() > 0) {
    if (HasContents(in.contents())) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".contents: must be empty when raw_input_contents is set"));
    }
    const int raw = RawIndex(r, i);
    const int64_t have = static_cast<int64_t>(r.raw_input_contents(raw).size());
    if (element_bytes > 0 && have != elements * element_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw_input_contents[", raw, "]: has ", have,
                       " bytes, but ", ShapeString(in.shape()), " ",
                       in.datatype(), " needs ", elements * element_bytes));
    }
    return absl::OkStatus();
  }
  const int64_t have = ContentsCount(in.contents(), in.datatype());
  if (have < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".contents: ", in.datatype(),
                     " has no typed contents; send it in raw_input_contents"));
  }
  if (have != elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".contents: has ", have, " ", in.datatype(), " elements, but ",
        ShapeString(in.shape()), " needs ", elements));
  }
  return absl::OkStatus();
}

// Whether message starts with the field name (whole: followed by '.',
// '[' or ':').
bool StartsWithField(absl::string_view message, absl::string_view name) {
  return absl::StartsWith(message, name) && message.size() > name.size() &&
         (message[name.size()] == '.' || message[name.size()] == '[' ||
          message[name.size()] == ':');
}

// The name of a native SharedMemoryRef's field (under prefix, e.g.
// "input.shared_memory") in message as the protocol's parameter (under to,
// e.g. "inputs[0].parameters."); the range and overlap errors, which name
// the reference itself, name its offset. nullopt when message is about
// another field.
std::optional<std::pair<std::string, std::string>> SharedMemoryRename(
    absl::string_view message, absl::string_view prefix, absl::string_view to) {
  if (!StartsWithField(message, prefix)) return std::nullopt;
  for (const auto& [native, name] :
       {std::pair<absl::string_view, absl::string_view>{".region",
                                                        "shared_memory_region"},
        {".byte_size", "shared_memory_byte_size"},
        {".offset", "shared_memory_offset"}}) {
    const std::string from = absl::StrCat(prefix, native);
    if (StartsWithField(message, from)) {
      return std::make_pair(from, absl::StrCat(to, name));
    }
  }
  const absl::string_view rest = message.substr(prefix.size());
  const bool range = absl::StartsWith(rest, ": the range") ||
                     absl::StartsWith(rest, ": bytes ");
  return std::make_pair(std::string(prefix),
                        absl::StrCat(to, range ? "shared_memory_offset"
                                               : "shared_memory_region"));
}

// Marks out as written into a region: its parameters say where and how
// many bytes, and its raw_output_contents entry is empty (kept, so that
// the entries stay one per output).
void SharedMemoryOutput(const std::string& region, uint64_t offset,
                        uint64_t bytes,
                        ModelInferResponse::InferOutputTensor* out,
                        ModelInferResponse* response) {
  auto& params = *out->mutable_parameters();
  params["shared_memory_region"].set_string_param(region);
  params["shared_memory_byte_size"].set_int64_param(
      static_cast<int64_t>(bytes));
  if (offset != 0) {
    params["shared_memory_offset"].set_int64_param(
        static_cast<int64_t>(offset));
  }
  response->add_raw_output_contents();
}

// FAILED_PRECONDITION naming the region's parameter when its object
// shrank or vanished (before or while its bytes were used).
absl::Status CheckRegionAlive(const SharedMemoryRegion& region,
                              absl::string_view params) {
  const absl::Status alive = region.CheckAlive();
  if (alive.ok()) return alive;
  return absl::Status(
      alive.code(),
      absl::StrCat(params, "shared_memory_region: ", alive.message()));
}

// [shm.offset, shm.offset + bytes) of owner's region shm.region, checked
// as the native codec checks a SharedMemoryRef: the size equals bytes (an
// input) or is at least bytes (an output), the range lies in the region,
// the object still covers it. keep holds the region while its bytes are
// used. Errors name "<field>.parameters.shared_memory_*"; another owner's
// region is as absent as one never registered.
absl::StatusOr<char*> ResolveRegion(
    const SharedMemoryRegistry* registry, const std::string& owner,
    const ShmParams& shm, absl::string_view field, uint64_t bytes,
    bool is_output, std::shared_ptr<const SharedMemoryRegion>* keep) {
  const std::string params = absl::StrCat(field, ".parameters.");
  if (registry == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        params, "shared_memory_region: shared memory is not served"));
  }
  if (is_output ? shm.byte_size < bytes : shm.byte_size != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(params, "shared_memory_byte_size: ", shm.byte_size,
                     ", but the tensor needs ",
                     is_output ? "at least " : "exactly ", bytes, " bytes"));
  }
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> region =
      registry->Find(owner, shm.region);
  if (!region.ok()) {
    return absl::Status(region.status().code(),
                        absl::StrCat(params, "shared_memory_region: ",
                                     region.status().message()));
  }
  if ((*region)->on_device()) {
    // identity copies on the host, which cannot address device memory.
    return absl::InvalidArgumentError(absl::StrCat(
        params, "shared_memory_region: ", Quoted(shm.region),
        " is CUDA shared memory, which the identity model does not take "
        "(the op models do)"));
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(shm.offset, shm.byte_size, &end) ||
      end > (*region)->byte_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        params, "shared_memory_offset: the range offset ", shm.offset,
        " + byte_size ", shm.byte_size, " lies outside region ",
        Quoted(shm.region), " of ", (*region)->byte_size(), " bytes"));
  }
  COALESCE_RETURN_IF_ERROR(CheckRegionAlive(**region, params));
  char* data = (*region)->data() + shm.offset;
  *keep = std::move(*region);
  return data;
}

// The native codec names its own fields; model, inputs (FindInputs) and
// outputs (each model output's index in the request's outputs, -1 when
// not there) know the protocol's.
grpc::Status InProtocolFields(const grpc::Status& status,
                              const ModelSpec& model,
                              const ModelInferRequest& r,
                              absl::Span<const int> inputs,
                              absl::Span<const int> outputs) {
  if (status.ok()) return status;
  const std::string& message = status.error_message();
  const auto renamed = [&](absl::string_view from, absl::string_view to) {
    return grpc::Status(status.error_code(),
                        absl::StrCat(to, message.substr(from.size())));
  };
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k] < 0) continue;
    if (const auto shm = SharedMemoryRename(
            message, absl::StrCat("options.outputs[", k, "].shared_memory"),
            absl::StrCat("outputs[", outputs[k], "].parameters."))) {
      return renamed(shm->first, shm->second);
    }
  }
  for (size_t k = 0; k < model.inputs.size(); ++k) {
    const absl::string_view native = model.inputs[k].native;
    if (inputs[k] < 0 || !StartsWithField(message, native)) continue;
    const std::string in = absl::StrCat("inputs[", inputs[k], "]");
    const std::string raw = absl::StrCat(native, ".raw");
    const std::string dtype = absl::StrCat(native, ".dtype");
    if (const auto shm =
            SharedMemoryRename(message, absl::StrCat(native, ".shared_memory"),
                               absl::StrCat(in, ".parameters."))) {
      return renamed(shm->first, shm->second);
    }
    if (StartsWithField(message, raw)) {
      return renamed(raw, absl::StrCat("raw_input_contents[",
                                       RawIndex(r, inputs[k]), "]"));
    }
    if (StartsWithField(message, dtype)) {
      return renamed(dtype, absl::StrCat(in, ".datatype"));
    }
    return renamed(native, in);
  }
  const ParameterRename options[] = {{"options.variant", "parameters.variant"},
                                     {"options.report", "parameters.report"}};
  for (absl::Span<const ParameterRename> renames :
       {model.renames, absl::Span<const ParameterRename>(options)}) {
    for (const ParameterRename& r : renames) {
      if (StartsWithField(message, r.native)) return renamed(r.native, r.name);
    }
  }
  return status;
}

InferParameter StringParam(std::string value) {
  InferParameter p;
  p.set_string_param(std::move(value));
  return p;
}
InferParameter DoubleParam(double value) {
  InferParameter p;
  p.set_double_param(value);
  return p;
}
InferParameter Int64Param(int64_t value) {
  InferParameter p;
  p.set_int64_param(value);
  return p;
}

// The KernelReport's figures as response parameters, "report.<field>".
void ReportAsParameters(const v1::KernelReport& report,
                        ModelInferResponse* response) {
  auto& params = *response->mutable_parameters();
  params["report.variant"] = StringParam(report.variant());
  params["report.backend"] = StringParam(report.backend());
  params["report.device"] = StringParam(report.device());
  params["report.selection_source"] = StringParam(report.selection_source());
  params["report.selection_reason"] = StringParam(report.selection_reason());
  params["report.kernel_seconds"] = DoubleParam(report.kernel_seconds());
  params["report.bytes_moved"] = Int64Param(report.bytes_moved());
  params["report.achieved_bytes_per_second"] =
      DoubleParam(report.achieved_bytes_per_second());
  params["report.peak_bandwidth_fraction"] =
      DoubleParam(report.peak_bandwidth_fraction());
  params["report.batch_size"] = Int64Param(report.batch_size());
  params["report.device_ordinal"] = Int64Param(report.device_ordinal());
  params["report.placement"] = StringParam(report.placement());
  params["report.staged_bytes"] = Int64Param(report.staged_bytes());
}

// Finishes call with status and answers with it.
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                 RpcCall& call, const absl::Status& status,
                                 const google::protobuf::Message& request,
                                 const google::protobuf::Message& response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(call.Finish(status, request, response));
  return reactor;
}

}  // namespace

InferenceService::InferenceService(const Backend* backend,
                                   const Authenticator* auth,
                                   ServiceMetrics* metrics,
                                   TensorOpsService* ops,
                                   SharedMemoryRegistry* shared_memory,
                                   std::string version)
    : backend_(backend),
      auth_(auth),
      metrics_(metrics),
      ops_(ops),
      shared_memory_(shared_memory),
      version_(std::move(version)),
      stats_(std::size(kModels)) {}

grpc::ServerUnaryReactor* InferenceService::ServerLive(
    grpc::CallbackServerContext* context,
    const inference::ServerLiveRequest* request,
    inference::ServerLiveResponse* response) {
  RpcCall call(metrics_, Rpc::kServerLive, *context);
  const absl::Status caller = auth_->Authenticate(*context).status();
  if (caller.ok()) response->set_live(true);
  return Answer(context, call, caller, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(
    grpc::CallbackServerContext* context,
    const inference::ServerReadyRequest* request,
    inference::ServerReadyResponse* response) {
  RpcCall call(metrics_, Rpc::kServerReady, *context);
  const absl::Status caller = auth_->Authenticate(*context).status();
  // A sticky device fault makes the server unready, as it turns the health
  // service NOT_SERVING.
  if (caller.ok()) response->set_ready(backend_->Health().ok());
  return Answer(context, call, caller, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(
    grpc::CallbackServerContext* context,
    const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  RpcCall call(metrics_, Rpc::kModelReady, *context);
  absl::Status status = auth_->Authenticate(*context).status();
  if (status.ok()) {
    status = CheckModel(request->name(), "name", request->version(), "version")
                 .status();
  }
  if (status.ok()) response->set_ready(backend_->Health().ok());
  return Answer(context, call, status, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context,
    const inference::ServerMetadataRequest* request,
    inference::ServerMetadataResponse* response) {
  RpcCall call(metrics_, Rpc::kServerMetadata, *context);
  const absl::Status caller = auth_->Authenticate(*context).status();
  if (caller.ok()) {
    response->set_name("coalesce");
    response->set_version(version_);
    // Request parameters (the native models' options and arguments).
    response->add_extensions("parameters");
    response->add_extensions("model_configuration");
    response->add_extensions("statistics");
    response->add_extensions("system_shared_memory");
    if (backend_->kind() == BackendKind::kCuda) {
      response->add_extensions("cuda_shared_memory");
    }
  }
  return Answer(context, call, caller, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context,
    const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  RpcCall call(metrics_, Rpc::kModelMetadata, *context);
  const absl::Status caller = auth_->Authenticate(*context).status();
  if (!caller.ok()) return Answer(context, call, caller, *request, *response);
  const absl::StatusOr<const ModelSpec*> model =
      CheckModel(request->name(), "name", request->version(), "version");
  if (!model.ok()) {
    return Answer(context, call, model.status(), *request, *response);
  }
  response->set_name(request->name());
  response->add_versions(kVersion);
  response->set_platform("coalesce");
  // One datatype and shape each, as the protocol allows: identity takes
  // any datatype and shape, the others also FP16 and BF16 and other ranks
  // (transpose [-1,-1,-1], convert_layout 2 to 6 dimensions, gemm a
  // leading batch dimension; gelu_layer_norm's x any rank); the ones given
  // are what a client generating data (perf_analyzer) should send. The
  // optional tensors are listed too.
  const auto add = [](const TensorSpec& spec,
                      inference::ModelMetadataResponse::TensorMetadata* t) {
    t->set_name(std::string(spec.name));
    t->set_datatype("FP32");
    for (int i = 0; i < spec.rank; ++i) t->add_shape(-1);
  };
  for (const TensorSpec& t : (*model)->inputs) add(t, response->add_inputs());
  for (const TensorSpec& t : (*model)->outputs) {
    add(t, response->add_outputs());
  }
  return Answer(context, call, absl::OkStatus(), *request, *response);
}

// What one inference took: the phases end at submitted (its inputs are
// checked and in place: compute_input), ran (its outputs exist: queue and
// compute_infer) and end (its response is complete: compute_output).
struct InferenceService::Timing {
  RpcCall::Clock::time_point start, submitted, ran, end;
  // The kernel's own time within [submitted, ran), the rest being the wait
  // in the queue; negative when no kernel ran (identity).
  double kernel_seconds = -1;
  // The requests its launch served.
  int64_t batch_size = 1;
};

absl::Status InferenceService::Identity(const Caller& caller,
                                        ModelInferRequest& request,
                                        ModelInferResponse* response,
                                        Timing& timing) {
  COALESCE_ASSIGN_OR_RETURN(const std::vector<int> found,
                            FindInputs(request, *FindModel(kIdentity)));
  const int i = found[0];
  ModelInferRequest::InferInputTensor& in = *request.mutable_inputs(i);
  const std::string field = absl::StrCat("inputs[", i, "]");
  COALESCE_ASSIGN_OR_RETURN(
      const int element_bytes,
      ElementBytes(in.datatype(), absl::StrCat(field, ".datatype")));
  COALESCE_ASSIGN_OR_RETURN(const int64_t elements,
                            Elements(in.shape(), field));
  COALESCE_RETURN_IF_ERROR(CheckInputData(request, i, element_bytes, elements));
  COALESCE_ASSIGN_OR_RETURN(const std::optional<ShmParams> in_shm,
                            SharedMemoryParameters(in.parameters(), field));
  // OUTPUT0 asked for in shared memory: where.
  std::optional<ShmParams> out_shm;
  std::string out_field;
  for (int j = 0; j < request.outputs_size(); ++j) {
    out_field = absl::StrCat("outputs[", j, "]");
    COALESCE_ASSIGN_OR_RETURN(
        out_shm,
        SharedMemoryParameters(request.outputs(j).parameters(), out_field));
  }
  // The input's bytes: in a region, or raw (typed contents have none).
  std::shared_ptr<const SharedMemoryRegion> in_region, out_region;
  absl::string_view bytes;
  if (in_shm.has_value()) {
    // BYTES elements have no fixed size: the region's range is the tensor.
    const uint64_t need = element_bytes > 0
                              ? static_cast<uint64_t>(elements * element_bytes)
                              : in_shm->byte_size;
    COALESCE_ASSIGN_OR_RETURN(
        const char* data,
        ResolveRegion(shared_memory_, caller.identity, *in_shm, field, need,
                      /*is_output=*/false, &in_region));
    bytes = absl::string_view(data, need);
  } else if (request.raw_input_contents_size() > 0) {
    bytes = request.raw_input_contents(RawIndex(request, i));
  } else if (out_shm.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        out_field,
        ".parameters.shared_memory_region: identity writes shared memory "
        "only from raw_input_contents or shared memory, not typed contents"));
  }
  timing.submitted = RpcCall::Clock::now();
  auto* out = response->add_outputs();
  out->set_name(std::string(kOutput));
  out->set_datatype(in.datatype());
  *out->mutable_shape() = in.shape();
  if (out_shm.has_value()) {
    COALESCE_ASSIGN_OR_RETURN(
        char* data,
        ResolveRegion(shared_memory_, caller.identity, *out_shm, out_field,
                      bytes.size(), /*is_output=*/true, &out_region));
    // memmove: the client may name overlapping ranges of one region.
    std::memmove(data, bytes.data(), bytes.size());
    SharedMemoryOutput(out_shm->region, out_shm->offset, bytes.size(), out,
                       response);
  } else if (in_shm.has_value()) {
    response->add_raw_output_contents()->assign(bytes.data(), bytes.size());
  } else if (request.raw_input_contents_size() > 0) {
    // The data moves from request to response as it came.
    response->add_raw_output_contents()->swap(
        *request.mutable_raw_input_contents(RawIndex(request, i)));
  } else {
    out->mutable_contents()->Swap(in.mutable_contents());
  }
  // A region that shrank while it was copied read or wrote guarded zeros:
  // the result is not the tensor.
  if (in_region != nullptr) {
    COALESCE_RETURN_IF_ERROR(
        CheckRegionAlive(*in_region, absl::StrCat(field, ".parameters.")));
  }
  if (out_region != nullptr) {
    COALESCE_RETURN_IF_ERROR(
        CheckRegionAlive(*out_region, absl::StrCat(out_field, ".parameters.")));
  }
  timing.ran = RpcCall::Clock::now();
  return absl::OkStatus();
}

namespace {

// The native request and response of one call, alive until its answer.
struct NativeCall {
  std::unique_ptr<google::protobuf::Message> native;
  std::unique_ptr<google::protobuf::Message> result;
  std::vector<int> inputs;  // each model input's index in the request
  // Each model output's index in the request's outputs (-1: not there).
  std::vector<int> outputs;
};

// Checks the request against model and builds call's native request from
// it, moving the inputs' bytes into it.
absl::Status BuildNative(ModelInferRequest& request, const ModelSpec& model,
                         NativeCall* call) {
  COALESCE_ASSIGN_OR_RETURN(call->inputs, FindInputs(request, model));
  call->native = model.new_request();
  call->result = model.new_response();
  google::protobuf::Message* native = call->native.get();
  const google::protobuf::Descriptor* descriptor = native->GetDescriptor();
  const google::protobuf::Reflection* reflection = native->GetReflection();
  for (size_t k = 0; k < model.inputs.size(); ++k) {
    const int i = call->inputs[k];
    if (i < 0) continue;
    ModelInferRequest::InferInputTensor& in = *request.mutable_inputs(i);
    const std::string field = absl::StrCat("inputs[", i, "]");
    COALESCE_ASSIGN_OR_RETURN(
        const v1::DataType dtype,
        NativeDType(in.datatype(), absl::StrCat(field, ".datatype"),
                    model.name));
    COALESCE_ASSIGN_OR_RETURN(const int64_t elements,
                              Elements(in.shape(), field));
    const int element_bytes = dtype == v1::DATA_TYPE_FLOAT32 ? 4 : 2;
    COALESCE_RETURN_IF_ERROR(
        CheckInputData(request, i, element_bytes, elements));
    auto* t = static_cast<v1::Tensor*>(reflection->MutableMessage(
        native,
        descriptor->FindFieldByName(std::string(model.inputs[k].native))));
    t->set_dtype(dtype);
    *t->mutable_shape() = in.shape();
    COALESCE_ASSIGN_OR_RETURN(const std::optional<ShmParams> shm,
                              SharedMemoryParameters(in.parameters(), field));
    if (shm.has_value()) {
      // The native codec checks the size, the range and that the region
      // is the caller's.
      v1::SharedMemoryRef* ref = t->mutable_shared_memory();
      ref->set_region(shm->region);
      ref->set_offset(shm->offset);
      ref->set_byte_size(shm->byte_size);
    } else if (request.raw_input_contents_size() > 0) {
      // Moved, not copied: the request is read no more.
      t->mutable_raw()->swap(
          *request.mutable_raw_input_contents(RawIndex(request, i)));
    } else {
      // Typed contents exist only for FP32 (CheckInputData).
      const auto& values = in.contents().fp32_contents();
      t->mutable_raw()->assign(reinterpret_cast<const char*>(values.data()),
                               values.size() * sizeof(float));
    }
  }
  auto* options = static_cast<v1::ExecutionOptions*>(reflection->MutableMessage(
      native, descriptor->FindFieldByName("options")));
  COALESCE_RETURN_IF_ERROR(OptionsToNative(request, options));
  // Outputs asked for in shared memory are written there by the kernel.
  call->outputs.assign(model.outputs.size(), -1);
  for (int j = 0; j < request.outputs_size(); ++j) {
    size_t k = 0;
    while (model.outputs[k].name != request.outputs(j).name()) ++k;
    call->outputs[k] = j;
    COALESCE_ASSIGN_OR_RETURN(
        const std::optional<ShmParams> shm,
        SharedMemoryParameters(request.outputs(j).parameters(),
                               absl::StrCat("outputs[", j, "]")));
    if (!shm.has_value()) continue;
    while (options->outputs_size() <= static_cast<int>(k)) {
      options->add_outputs();
    }
    v1::OutputSpec* spec = options->mutable_outputs(static_cast<int>(k));
    spec->set_placement(v1::OUTPUT_PLACEMENT_SHARED_MEMORY);
    spec->mutable_shared_memory()->set_region(shm->region);
    spec->mutable_shared_memory()->set_offset(shm->offset);
    spec->mutable_shared_memory()->set_byte_size(shm->byte_size);
  }
  // Other parameters are the client's business (the protocol lets clients
  // send ones a model ignores).
  return model.parameters(request, native);
}

// The native response's KernelReport; null when it has none.
const v1::KernelReport* ReportOf(const google::protobuf::Message& result) {
  const google::protobuf::FieldDescriptor* report =
      result.GetDescriptor()->FindFieldByName("report");
  const google::protobuf::Reflection* reflection = result.GetReflection();
  if (!reflection->HasField(result, report)) return nullptr;
  return static_cast<const v1::KernelReport*>(
      &reflection->GetMessage(result, report));
}

// Moves result's outputs (those requested, or all) into response, and its
// report when the request asked for it (parameter "report").
void NativeToResponse(const ModelSpec& model, const ModelInferRequest& request,
                      google::protobuf::Message& result, bool report_asked,
                      ModelInferResponse* response) {
  const google::protobuf::Descriptor* descriptor = result.GetDescriptor();
  const google::protobuf::Reflection* reflection = result.GetReflection();
  for (const TensorSpec& spec : model.outputs) {
    const google::protobuf::FieldDescriptor* field =
        descriptor->FindFieldByName(std::string(spec.native));
    if (!reflection->HasField(result, field)) continue;
    const bool wanted = request.outputs_size() == 0 ||
                        absl::c_any_of(request.outputs(), [&](const auto& o) {
                          return o.name() == spec.name;
                        });
    if (!wanted) continue;
    auto& t =
        *static_cast<v1::Tensor*>(reflection->MutableMessage(&result, field));
    auto* out = response->add_outputs();
    out->set_name(std::string(spec.name));
    out->set_datatype(std::string(KServeDatatype(t.dtype())));
    *out->mutable_shape() = t.shape();
    if (t.has_shared_memory()) {
      SharedMemoryOutput(t.shared_memory().region(), t.shared_memory().offset(),
                         t.shared_memory().byte_size(), out, response);
      continue;
    }
    response->add_raw_output_contents()->swap(*t.mutable_raw());
  }
  const v1::KernelReport* report = ReportOf(result);
  if (report_asked && report != nullptr) ReportAsParameters(*report, response);
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::ModelInfer(
    grpc::CallbackServerContext* context, const ModelInferRequest* request,
    ModelInferResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The inputs' bytes move out of the request (into the response or the
  // native request) instead of being copied: gRPC owns the message, which
  // is no const object, until the call ends, and nothing reads it after
  // this handler but the names of the requested outputs.
  Infer(context, auth_->Authenticate(*context),
        const_cast<ModelInferRequest&>(*request), response,
        [reactor](grpc::Status status) { reactor->Finish(std::move(status)); });
  return reactor;
}

void InferenceService::Infer(grpc::CallbackServerContext* context,
                             const absl::StatusOr<Caller>& caller,
                             ModelInferRequest& request,
                             ModelInferResponse* response,
                             std::function<void(grpc::Status)> done) {
  Timing timing;
  timing.start = RpcCall::Clock::now();
  // Reported as kModelInfer unless it reaches a native op (then as that
  // op, by ops_).
  const int64_t request_bytes = static_cast<int64_t>(request.ByteSizeLong());
  int model_index = -1;  // known once the model is
  const auto answer = [&](const absl::Status& status) {
    RpcCall call(metrics_, Rpc::kModelInfer, *context, timing.start);
    timing.end = RpcCall::Clock::now();
    grpc::Status answered = call.Finish(
        status, request_bytes,
        status.ok() ? static_cast<int64_t>(response->ByteSizeLong()) : 0);
    if (model_index >= 0) Record(model_index, status.ok(), timing);
    done(std::move(answered));
  };
  if (!caller.ok()) return answer(caller.status());
  const absl::StatusOr<const ModelSpec*> model =
      CheckModel(request.model_name(), "model_name", request.model_version(),
                 "model_version");
  if (!model.ok()) return answer(model.status());
  model_index = static_cast<int>(*model - kModels);
  response->set_model_name(request.model_name());
  response->set_model_version(kVersion);
  response->set_id(request.id());
  if ((*model)->run == nullptr) {
    return answer(Identity(*caller, request, response, timing));
  }
  auto call = std::make_shared<NativeCall>();
  const absl::Status built = BuildNative(request, **model, call.get());
  if (!built.ok()) return answer(built);
  // The report is always made (it costs a few fields): its kernel time and
  // batch size feed the statistics; the response carries it only when the
  // request asked.
  auto* options = static_cast<v1::ExecutionOptions*>(
      call->native->GetReflection()->MutableMessage(
          call->native.get(),
          call->native->GetDescriptor()->FindFieldByName("options")));
  const bool report_asked = options->report();
  options->set_report(true);
  timing.submitted = RpcCall::Clock::now();
  const ModelSpec* spec = *model;
  spec->run(
      ops_, context, caller, call->native.get(), call->result.get(),
      [this, call, &request, response, spec, timing, model_index, report_asked,
       done = std::move(done)](grpc::Status status) mutable {
        timing.ran = RpcCall::Clock::now();
        if (status.ok()) {
          if (const v1::KernelReport* r = ReportOf(*call->result)) {
            timing.kernel_seconds = r->kernel_seconds();
            timing.batch_size = std::max<int64_t>(1, r->batch_size());
          }
          NativeToResponse(*spec, request, *call->result, report_asked,
                           response);
        }
        timing.end = RpcCall::Clock::now();
        Record(model_index, status.ok(), timing);
        done(InProtocolFields(status, *spec, request, call->inputs,
                              call->outputs));
      });
}

void InferenceService::Record(int model, bool ok, const Timing& timing) {
  const auto ns = [](RpcCall::Clock::duration d) {
    return static_cast<uint64_t>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  };
  const uint64_t total = ns(timing.end - timing.start);
  absl::MutexLock lock(&stats_mu_);
  ModelCounters& m = stats_[model];
  if (!ok) {
    m.fail.Add(total);
    return;
  }
  m.success.Add(total);
  ++m.inference_count;
  m.last_inference_ms = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  const uint64_t input = ns(timing.submitted - timing.start);
  const uint64_t output = ns(timing.end - timing.ran);
  uint64_t infer = ns(timing.ran - timing.submitted);
  // Every inference counts in queue, as Triton's do (perf_analyzer finds a
  // model's statistics by it); one that runs no kernel waited for none.
  uint64_t queued = 0;
  if (timing.kernel_seconds >= 0) {
    const uint64_t kernel = static_cast<uint64_t>(timing.kernel_seconds * 1e9);
    queued = infer > kernel ? infer - kernel : 0;
    infer = kernel;
  }
  m.queue.Add(queued);
  m.compute_input.Add(input);
  m.compute_infer.Add(infer);
  m.compute_output.Add(output);
  BatchCounters& b = m.batches[timing.batch_size];
  ++b.requests;
  b.compute_input.Add(input);
  b.compute_infer.Add(infer);
  b.compute_output.Add(output);
}

// One ModelStreamInfer stream: reads a request, runs it through Infer and
// writes its answer before reading the next, so that responses keep the
// requests' order and a stream holds one request's memory at a time. No
// thread waits meanwhile: each step starts the next from its callback. A
// failed request is answered with its error_message and the stream goes
// on; the stream ends when the client half-closes (OK) or cancels, or a
// write fails (CANCELLED).
class InferenceService::StreamReactor final
    : public grpc::ServerBidiReactor<ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  StreamReactor(InferenceService* service, grpc::CallbackServerContext* context)
      : service_(service),
        context_(context),
        call_(service->metrics_, Rpc::kModelStreamInfer, *context),
        caller_(service->auth_->Authenticate(*context)) {
    if (!caller_.ok()) {
      End(caller_.status());
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed, or the stream broke (cancelled).
      End(context_->IsCancelled()
              ? absl::CancelledError("the stream was cancelled")
              : absl::OkStatus());
      return;
    }
    request_bytes_ += static_cast<int64_t>(request_.ByteSizeLong());
    response_.Clear();
    service_->Infer(context_, caller_, request_,
                    response_.mutable_infer_response(),
                    [this](grpc::Status status) { Answer(status); });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(absl::CancelledError("the stream was cancelled"));
      return;
    }
    request_.Clear();
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  // Writes request_'s answer: its response, or its error.
  void Answer(const grpc::Status& status) {
    if (!status.ok()) {
      // The response keeps only what names the request, for the client to
      // match the error to it.
      inference::ModelInferResponse named;
      named.set_model_name(request_.model_name());
      named.set_model_version(request_.model_version());
      named.set_id(request_.id());
      *response_.mutable_infer_response() = std::move(named);
      response_.set_error_message(status.error_message());
    }
    response_bytes_ += static_cast<int64_t>(response_.ByteSizeLong());
    StartWrite(&response_);
  }

  void End(const absl::Status& status) {
    Finish(call_.Finish(status, request_bytes_, response_bytes_));
  }

  InferenceService* const service_;
  grpc::CallbackServerContext* const context_;
  RpcCall call_;
  const absl::StatusOr<Caller> caller_;
  ModelInferRequest request_;
  inference::ModelStreamInferResponse response_;
  int64_t request_bytes_ = 0;
  int64_t response_bytes_ = 0;
};

grpc::ServerBidiReactor<ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new StreamReactor(this, context);
}

namespace {

// Triton's name of a protocol datatype (ModelConfig's data_type).
inference::DataType ConfigDatatype(absl::string_view datatype) {
  if (datatype == "FP16") return inference::TYPE_FP16;
  if (datatype == "BF16") return inference::TYPE_BF16;
  return inference::TYPE_FP32;
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context,
    const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  RpcCall call(metrics_, Rpc::kModelConfig, *context);
  const absl::Status caller = auth_->Authenticate(*context).status();
  if (!caller.ok()) return Answer(context, call, caller, *request, *response);
  const absl::StatusOr<const ModelSpec*> model =
      CheckModel(request->name(), "name", request->version(), "version");
  if (!model.ok()) {
    return Answer(context, call, model.status(), *request, *response);
  }
  inference::ModelConfig* config = response->mutable_config();
  config->set_name(std::string((*model)->name));
  config->set_platform("coalesce");
  config->set_backend("coalesce");
  // Shapes are whole (no batch dimension of Triton's kind); the datatype
  // and ranks are ModelMetadata's.
  config->set_max_batch_size(0);
  for (const TensorSpec& t : (*model)->inputs) {
    inference::ModelInput* in = config->add_input();
    in->set_name(std::string(t.name));
    in->set_data_type(ConfigDatatype("FP32"));
    for (int i = 0; i < t.rank; ++i) in->add_dims(-1);
    in->set_optional(!t.required);
  }
  for (const TensorSpec& t : (*model)->outputs) {
    inference::ModelOutput* out = config->add_output();
    out->set_name(std::string(t.name));
    out->set_data_type(ConfigDatatype("FP32"));
    for (int i = 0; i < t.rank; ++i) out->add_dims(-1);
  }
  return Answer(context, call, absl::OkStatus(), *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context,
    const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  RpcCall call(metrics_, Rpc::kRepositoryIndex, *context);
  absl::Status status = auth_->Authenticate(*context).status();
  if (status.ok() && !request->repository_name().empty()) {
    status =
        absl::NotFoundError(absl::StrCat("repository_name: unknown repository ",
                                         Quoted(request->repository_name()),
                                         " (the server has one, named \"\")"));
  }
  if (!status.ok()) return Answer(context, call, status, *request, *response);
  // Every model is loaded from the start; all are as ready as the backend.
  const absl::Status health = backend_->Health();
  for (const ModelSpec& m : kModels) {
    if (request->ready() && !health.ok()) break;
    auto* index = response->add_models();
    index->set_name(std::string(m.name));
    index->set_version(kVersion);
    index->set_state(health.ok() ? "READY" : "UNAVAILABLE");
    if (!health.ok()) index->set_reason(std::string(health.message()));
  }
  return Answer(context, call, absl::OkStatus(), *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context,
    const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  RpcCall call(metrics_, Rpc::kModelStatistics, *context);
  const absl::Status caller = auth_->Authenticate(*context).status();
  if (!caller.ok()) return Answer(context, call, caller, *request, *response);
  int only = -1;  // every model
  if (!request->name().empty()) {
    const absl::StatusOr<const ModelSpec*> model =
        CheckModel(request->name(), "name", request->version(), "version");
    if (!model.ok()) {
      return Answer(context, call, model.status(), *request, *response);
    }
    only = static_cast<int>(*model - kModels);
  } else if (!request->version().empty()) {
    return Answer(context, call,
                  absl::InvalidArgumentError(
                      "version: given without name (every model has version "
                      "\"1\"; leave both empty for all)"),
                  *request, *response);
  }
  const auto to_proto = [](const Duration& d,
                           inference::StatisticDuration* out) {
    out->set_count(d.count);
    out->set_ns(d.ns);
  };
  absl::MutexLock lock(&stats_mu_);
  for (int i = 0; i < static_cast<int>(stats_.size()); ++i) {
    if (only >= 0 && i != only) continue;
    const ModelCounters& m = stats_[i];
    inference::ModelStatistics* out = response->add_model_stats();
    out->set_name(std::string(kModels[i].name));
    out->set_version(kVersion);
    out->set_last_inference(m.last_inference_ms);
    out->set_inference_count(m.inference_count);
    inference::InferStatistics* s = out->mutable_inference_stats();
    to_proto(m.success, s->mutable_success());
    to_proto(m.fail, s->mutable_fail());
    to_proto(m.queue, s->mutable_queue());
    to_proto(m.compute_input, s->mutable_compute_input());
    to_proto(m.compute_infer, s->mutable_compute_infer());
    to_proto(m.compute_output, s->mutable_compute_output());
    uint64_t executions = 0;
    for (const auto& [size, b] : m.batches) {
      // A launch of `size` requests is seen by each of them: its kernel
      // time `size` times. Requests of other front ends or models sharing
      // a launch are not counted, so a launch shared with them is rounded
      // up to one.
      const uint64_t n = static_cast<uint64_t>(size);
      const uint64_t launches = (b.requests + n - 1) / n;
      executions += launches;
      inference::InferBatchStatistics* batch = out->add_batch_stats();
      batch->set_batch_size(n);
      batch->mutable_compute_input()->set_count(launches);
      batch->mutable_compute_input()->set_ns(b.compute_input.ns);
      batch->mutable_compute_infer()->set_count(launches);
      batch->mutable_compute_infer()->set_ns(b.compute_infer.ns / n);
      batch->mutable_compute_output()->set_count(launches);
      batch->mutable_compute_output()->set_ns(b.compute_output.ns);
    }
    out->set_execution_count(executions);
  }
  return Answer(context, call, absl::OkStatus(), *request, *response);
}

namespace {

// The caller's regions of one kind (on_device: CUDA) into regions, by name,
// only name's when it is set (NOT_FOUND when that is not among them); fill
// writes one entry.
template <typename Map, typename Fill>
absl::Status ListRegions(const SharedMemoryRegistry& registry,
                         const std::string& owner, bool on_device,
                         const std::string& name, Map& regions, Fill fill) {
  for (const SharedMemoryListing& r : registry.List(owner)) {
    if (r.on_device != on_device || (!name.empty() && r.name != name)) {
      continue;
    }
    fill(r, regions[r.name]);
  }
  if (!name.empty() && regions.empty()) {
    return absl::NotFoundError(
        absl::StrCat("name: no ", on_device ? "CUDA" : "system",
                     " shared-memory region ", Quoted(name), " is registered"));
  }
  return absl::OkStatus();
}

// Unregisters the caller's region name of one kind, or with no name every
// region of that kind. One unregistered meanwhile by another call of the
// same caller is gone all the same.
absl::Status UnregisterRegions(SharedMemoryRegistry& registry,
                               const std::string& owner, bool on_device,
                               const std::string& name) {
  if (!name.empty()) return registry.Unregister(owner, name, on_device);
  absl::Status status;
  for (const SharedMemoryListing& r : registry.List(owner)) {
    if (r.on_device != on_device) continue;
    const absl::Status s = registry.Unregister(owner, r.name, on_device);
    if (!s.ok() && !absl::IsNotFound(s)) status = s;
  }
  return status;
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  RpcCall call(metrics_, Rpc::kSystemSharedMemoryStatus, *context);
  const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
  absl::Status status = caller.status();
  if (status.ok()) {
    status = ListRegions(*shared_memory_, caller->identity, /*on_device=*/false,
                         request->name(), *response->mutable_regions(),
                         [](const SharedMemoryListing& r, auto& out) {
                           out.set_name(r.name);
                           out.set_key(r.key);
                           out.set_offset(r.offset);
                           out.set_byte_size(r.byte_size);
                         });
  }
  return Answer(context, call, status, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse* response) {
  RpcCall call(metrics_, Rpc::kSystemSharedMemoryRegister, *context);
  const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
  absl::Status status = caller.status();
  if (status.ok()) {
    // The registry names the request's fields (name, key, offset,
    // byte_size) in its errors.
    status = shared_memory_->Register(caller->identity, request->name(),
                                      request->key(), request->offset(),
                                      request->byte_size(), caller->uid);
  }
  return Answer(context, call, status, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse* response) {
  RpcCall call(metrics_, Rpc::kSystemSharedMemoryUnregister, *context);
  const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
  absl::Status status = caller.status();
  if (status.ok()) {
    status = UnregisterRegions(*shared_memory_, caller->identity,
                               /*on_device=*/false, request->name());
  }
  return Answer(context, call, status, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* context,
    const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse* response) {
  RpcCall call(metrics_, Rpc::kCudaSharedMemoryStatus, *context);
  const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
  absl::Status status = caller.status();
  if (status.ok()) {
    status =
        ListRegions(*shared_memory_, caller->identity, /*on_device=*/true,
                    request->name(), *response->mutable_regions(),
                    [](const SharedMemoryListing& r, auto& out) {
                      out.set_name(r.name);
                      out.set_device_id(static_cast<uint64_t>(r.device_id));
                      out.set_byte_size(r.byte_size);
                    });
  }
  return Answer(context, call, status, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::CudaSharedMemoryRegisterRequest* request,
    inference::CudaSharedMemoryRegisterResponse* response) {
  RpcCall call(metrics_, Rpc::kCudaSharedMemoryRegister, *context);
  const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
  absl::Status status = caller.status();
  // The region is mapped on the device that exported it.
  const int device = backend_->IndexOfOrdinal(request->device_id());
  if (status.ok() && backend_->kind() != BackendKind::kCuda) {
    status = absl::UnimplementedError(absl::StrCat(
        "CUDA shared memory needs the CUDA backend; this server runs the ",
        BackendName(backend_->kind()),
        " backend (use system shared memory, or send the tensors inline)"));
  } else if (status.ok() && device < 0) {
    std::vector<int> served;
    for (int i = 0; i < backend_->device_count(); ++i) {
      served.push_back(backend_->device_at(i).ordinal);
    }
    status = absl::InvalidArgumentError(absl::StrCat(
        "device_id: ", request->device_id(),
        ", but this server runs on CUDA device", served.size() > 1 ? "s " : " ",
        absl::StrJoin(served, ",")));
  } else if (status.ok()) {
    // The registry checks the gate, the caller and the name before the
    // handle is opened, and the size after.
    status = shared_memory_->RegisterDevice(
        caller->identity, request->name(), request->device_id(),
        request->byte_size(), caller->uid,
        [&](int64_t* allocation_bytes)
            -> absl::StatusOr<std::shared_ptr<void>> {
          absl::StatusOr<std::shared_ptr<void>> memory =
              backend_->OpenIpcMemory(request->raw_handle(), device,
                                      allocation_bytes);
          if (memory.ok()) return memory;
          return absl::Status(
              memory.status().code(),
              absl::StrCat("raw_handle: ", memory.status().message()));
        });
  }
  return Answer(context, call, status, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::CudaSharedMemoryUnregisterRequest* request,
    inference::CudaSharedMemoryUnregisterResponse* response) {
  RpcCall call(metrics_, Rpc::kCudaSharedMemoryUnregister, *context);
  const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
  absl::Status status = caller.status();
  if (status.ok()) {
    status = UnregisterRegions(*shared_memory_, caller->identity,
                               /*on_device=*/true, request->name());
  }
  return Answer(context, call, status, *request, *response);
}

}  // namespace coalesce
