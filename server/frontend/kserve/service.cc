#include "server/frontend/kserve/service.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

// The native dtype of a transpose input.
absl::StatusOr<v1::DataType> NativeDType(absl::string_view datatype,
                                         absl::string_view field) {
  COALESCE_RETURN_IF_ERROR(ElementBytes(datatype, field).status());
  if (datatype == "FP32") return v1::DATA_TYPE_FLOAT32;
  if (datatype == "FP16") return v1::DATA_TYPE_FLOAT16;
  if (datatype == "BF16") return v1::DATA_TYPE_BFLOAT16;
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": model 'transpose' takes FP32, FP16 or BF16, got ",
                   Quoted(datatype)));
}

// NOT_FOUND naming the field unless name is a served model and version is
// empty (the server's choice) or the served one.
absl::Status CheckModel(absl::string_view name, absl::string_view name_field,
                        absl::string_view version,
                        absl::string_view version_field) {
  if (name != InferenceService::kIdentity &&
      name != InferenceService::kTranspose) {
    return absl::NotFoundError(absl::StrCat(name_field, ": unknown model ",
                                            Quoted(name),
                                            " (served: identity, transpose)"));
  }
  if (!version.empty() && version != InferenceService::kVersion) {
    return absl::NotFoundError(absl::StrCat(
        version_field, ": model ", Quoted(name), " has no version ",
        Quoted(version), " (served: \"", InferenceService::kVersion, "\")"));
  }
  return absl::OkStatus();
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

// Checks the request's tensors against a model with the one input INPUT0
// and the one output OUTPUT0, and returns INPUT0's index: every input is
// named INPUT0 (once), raw_input_contents has one entry per input or none,
// every requested output is OUTPUT0.
absl::StatusOr<int> FindInput(const ModelInferRequest& r) {
  int found = -1;
  for (int i = 0; i < r.inputs_size(); ++i) {
    const std::string field = absl::StrCat("inputs[", i, "].name");
    if (r.inputs(i).name() != kInput) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": unknown input ", Quoted(r.inputs(i).name()),
                       "; model ", Quoted(r.model_name()), " takes ", kInput));
    }
    if (found >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", kInput, " is also inputs[", found, "]"));
    }
    found = i;
  }
  if (found < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs: missing input ", kInput));
  }
  if (r.raw_input_contents_size() > 0 &&
      r.raw_input_contents_size() != r.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents: ", r.raw_input_contents_size(), " entries for ",
        r.inputs_size(), " inputs (give one per input, or none)"));
  }
  for (int i = 0; i < r.outputs_size(); ++i) {
    if (r.outputs(i).name() != kOutput) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].name: unknown output ", Quoted(r.outputs(i).name()),
          "; model ", Quoted(r.model_name()), " has ", kOutput));
    }
  }
  return found;
}

// Checks that input i's data is where and as large as its datatype and
// shape say: raw_input_contents[i] of exactly the size (unless BYTES) with
// no typed contents, or else the typed contents of the right count.
absl::Status CheckInputData(const ModelInferRequest& r, int i,
                            int element_bytes, int64_t elements) {
  const ModelInferRequest::InferInputTensor& in = r.inputs(i);
  const std::string field = absl::StrCat("inputs[", i, "]");
  if (r.raw_input_contents_size() > 0) {
    if (HasContents(in.contents())) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".contents: must be empty when raw_input_contents is set"));
    }
    const int64_t have = static_cast<int64_t>(r.raw_input_contents(i).size());
    if (element_bytes > 0 && have != elements * element_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw_input_contents[", i, "]: has ", have,
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

// The native codec names its own fields; the caller knows the protocol's.
grpc::Status InProtocolFields(const grpc::Status& status, int input) {
  if (status.ok()) return status;
  std::string message = status.error_message();
  const std::string in = absl::StrCat("inputs[", input, "]");
  const std::pair<absl::string_view, std::string> renames[] = {
      {"input.raw", absl::StrCat("raw_input_contents[", input, "]")},
      {"input.dtype", absl::StrCat(in, ".datatype")},
      {"input", in},
      {"options.variant", "parameters.variant"},
      {"options.report", "parameters.report"},
  };
  for (const auto& [from, to] : renames) {
    if (absl::StartsWith(message, from)) {
      message = absl::StrCat(to, message.substr(from.size()));
      break;
    }
  }
  return grpc::Status(status.error_code(), message);
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

// The native request and response of one transpose, alive until its answer.
struct InferenceService::TransposeCall {
  v1::TransposeRequest native;
  v1::TransposeResponse result;
  int input = 0;  // INPUT0's index in the KServe request
};

InferenceService::InferenceService(const Backend* backend,
                                   const Authenticator* auth,
                                   ServiceMetrics* metrics,
                                   TensorOpsService* ops, std::string version)
    : backend_(backend),
      auth_(auth),
      metrics_(metrics),
      ops_(ops),
      version_(std::move(version)) {}

grpc::ServerUnaryReactor* InferenceService::ServerLive(
    grpc::CallbackServerContext* context,
    const inference::ServerLiveRequest* request,
    inference::ServerLiveResponse* response) {
  RpcCall call(metrics_, Rpc::kServerLive);
  const absl::Status caller = auth_->Authenticate(*context).status();
  if (caller.ok()) response->set_live(true);
  return Answer(context, call, caller, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(
    grpc::CallbackServerContext* context,
    const inference::ServerReadyRequest* request,
    inference::ServerReadyResponse* response) {
  RpcCall call(metrics_, Rpc::kServerReady);
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
  RpcCall call(metrics_, Rpc::kModelReady);
  absl::Status status = auth_->Authenticate(*context).status();
  if (status.ok()) {
    status = CheckModel(request->name(), "name", request->version(), "version");
  }
  if (status.ok()) response->set_ready(backend_->Health().ok());
  return Answer(context, call, status, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context,
    const inference::ServerMetadataRequest* request,
    inference::ServerMetadataResponse* response) {
  RpcCall call(metrics_, Rpc::kServerMetadata);
  const absl::Status caller = auth_->Authenticate(*context).status();
  if (caller.ok()) {
    response->set_name("coalesce");
    response->set_version(version_);
    // Request parameters (transpose's "variant" and "report").
    response->add_extensions("parameters");
  }
  return Answer(context, call, caller, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context,
    const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  RpcCall call(metrics_, Rpc::kModelMetadata);
  absl::Status status = auth_->Authenticate(*context).status();
  if (status.ok()) {
    status = CheckModel(request->name(), "name", request->version(), "version");
  }
  if (!status.ok()) return Answer(context, call, status, *request, *response);
  response->set_name(request->name());
  response->add_versions(kVersion);
  response->set_platform("coalesce");
  // One datatype and shape each, as the protocol allows: identity takes
  // any datatype and shape, transpose also FP16, BF16 and [-1,-1,-1]; the
  // ones given are what a client generating data (perf_analyzer) should
  // send.
  auto* in = response->add_inputs();
  auto* out = response->add_outputs();
  in->set_name(std::string(kInput));
  out->set_name(std::string(kOutput));
  in->set_datatype("FP32");
  out->set_datatype("FP32");
  const int rank = request->name() == kIdentity ? 1 : 2;
  for (int i = 0; i < rank; ++i) {
    in->add_shape(-1);
    out->add_shape(-1);
  }
  return Answer(context, call, absl::OkStatus(), *request, *response);
}

absl::Status InferenceService::Identity(ModelInferRequest& request,
                                        ModelInferResponse* response) {
  COALESCE_ASSIGN_OR_RETURN(const int i, FindInput(request));
  ModelInferRequest::InferInputTensor& in = *request.mutable_inputs(i);
  const std::string field = absl::StrCat("inputs[", i, "]");
  COALESCE_ASSIGN_OR_RETURN(
      const int element_bytes,
      ElementBytes(in.datatype(), absl::StrCat(field, ".datatype")));
  COALESCE_ASSIGN_OR_RETURN(const int64_t elements,
                            Elements(in.shape(), field));
  COALESCE_RETURN_IF_ERROR(CheckInputData(request, i, element_bytes, elements));
  auto* out = response->add_outputs();
  out->set_name(std::string(kOutput));
  out->set_datatype(in.datatype());
  *out->mutable_shape() = in.shape();
  // The data moves from request to response as it came: raw bytes or
  // typed contents.
  if (request.raw_input_contents_size() > 0) {
    response->add_raw_output_contents()->swap(
        *request.mutable_raw_input_contents(i));
  } else {
    out->mutable_contents()->Swap(in.mutable_contents());
  }
  return absl::OkStatus();
}

absl::Status InferenceService::BuildTranspose(ModelInferRequest& request,
                                              TransposeCall* call) {
  COALESCE_ASSIGN_OR_RETURN(const int i, FindInput(request));
  call->input = i;
  v1::TransposeRequest* native = &call->native;
  ModelInferRequest::InferInputTensor& in = *request.mutable_inputs(i);
  const std::string field = absl::StrCat("inputs[", i, "]");
  COALESCE_ASSIGN_OR_RETURN(
      const v1::DataType dtype,
      NativeDType(in.datatype(), absl::StrCat(field, ".datatype")));
  if (in.shape_size() != 2 && in.shape_size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".shape: model 'transpose' takes 2 or 3 dimensions, got ",
        ShapeString(in.shape())));
  }
  COALESCE_ASSIGN_OR_RETURN(const int64_t elements,
                            Elements(in.shape(), field));
  const int element_bytes = dtype == v1::DATA_TYPE_FLOAT32 ? 4 : 2;
  COALESCE_RETURN_IF_ERROR(CheckInputData(request, i, element_bytes, elements));
  for (const auto& [name, value] : request.parameters()) {
    if (name == "variant") {
      if (value.parameter_choice_case() != InferParameter::kStringParam) {
        return absl::InvalidArgumentError(
            "parameters.variant: must be a string_param");
      }
      native->mutable_options()->set_variant(value.string_param());
    } else if (name == "report") {
      if (value.parameter_choice_case() != InferParameter::kBoolParam) {
        return absl::InvalidArgumentError(
            "parameters.report: must be a bool_param");
      }
      native->mutable_options()->set_report(value.bool_param());
    }
    // Other parameters are the client's business (the protocol lets
    // clients send ones a model ignores).
  }
  v1::Tensor* t = native->mutable_input();
  t->set_dtype(dtype);
  *t->mutable_shape() = in.shape();
  if (request.raw_input_contents_size() > 0) {
    // Moved, not copied: the request is read no more.
    t->mutable_raw()->swap(*request.mutable_raw_input_contents(i));
  } else {
    // Typed contents exist only for FP32 (CheckInputData).
    const auto& values = in.contents().fp32_contents();
    t->mutable_raw()->assign(reinterpret_cast<const char*>(values.data()),
                             values.size() * sizeof(float));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(
    grpc::CallbackServerContext* context, const ModelInferRequest* request,
    ModelInferResponse* response) {
  // Reported as kModelInfer unless it reaches a native op (then as that
  // op, by ops_): the call starts counting once that is known, from here.
  const RpcCall::Clock::time_point start = RpcCall::Clock::now();
  const int64_t request_bytes = static_cast<int64_t>(request->ByteSizeLong());
  const auto answer = [&](const absl::Status& status) {
    RpcCall call(metrics_, Rpc::kModelInfer, start);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(call.Finish(
        status, request_bytes,
        status.ok() ? static_cast<int64_t>(response->ByteSizeLong()) : 0));
    return reactor;
  };
  absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
  if (!caller.ok()) return answer(caller.status());
  const absl::Status model =
      CheckModel(request->model_name(), "model_name", request->model_version(),
                 "model_version");
  if (!model.ok()) return answer(model);
  // The input's bytes move out of the request (into the response or the
  // native request) instead of being copied: gRPC owns the message, which
  // is no const object, until the call ends, and nothing reads it after
  // this handler.
  ModelInferRequest& moving = const_cast<ModelInferRequest&>(*request);
  response->set_model_name(request->model_name());
  response->set_model_version(kVersion);
  response->set_id(request->id());
  if (request->model_name() == kIdentity) {
    return answer(Identity(moving, response));
  }
  auto call = std::make_shared<TransposeCall>();
  const absl::Status built = BuildTranspose(moving, call.get());
  if (!built.ok()) return answer(built);
  const std::string datatype = request->inputs(call->input).datatype();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  ops_->RunTranspose(
      context, std::move(caller), &call->native, &call->result,
      [call, reactor, response, datatype](grpc::Status status) {
        if (status.ok()) {
          v1::Tensor& t = *call->result.mutable_output();
          auto* out = response->add_outputs();
          out->set_name(std::string(kOutput));
          out->set_datatype(datatype);
          *out->mutable_shape() = t.shape();
          response->add_raw_output_contents()->swap(*t.mutable_raw());
          if (call->result.has_report()) {
            ReportAsParameters(call->result.report(), response);
          }
        }
        reactor->Finish(InProtocolFields(status, call->input));
      });
  return reactor;
}

}  // namespace coalesce
