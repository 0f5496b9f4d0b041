#include "server/frontend/kserve/service.h"

#include <cstdint>
#include <cstring>
#include <functional>
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
#include "absl/strings/str_split.h"
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
// A double_param, or an int64_param (a client's "1" for 1.0).
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
  return WrongKind(name, "double_param");
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
  if (*value == "NCHW") return v1::LAYOUT_NCHW;
  if (*value == "NHWC") return v1::LAYOUT_NHWC;
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
  if (r.raw_input_contents_size() > 0 &&
      r.raw_input_contents_size() != r.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents: ", r.raw_input_contents_size(), " entries for ",
        r.inputs_size(), " inputs (give one per input, or none)"));
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

// Whether message starts with the field name (whole: followed by '.',
// '[' or ':').
bool StartsWithField(absl::string_view message, absl::string_view name) {
  return absl::StartsWith(message, name) && message.size() > name.size() &&
         (message[name.size()] == '.' || message[name.size()] == '[' ||
          message[name.size()] == ':');
}

// The native codec names its own fields; model and inputs (FindInputs)
// know the protocol's.
grpc::Status InProtocolFields(const grpc::Status& status,
                              const ModelSpec& model,
                              absl::Span<const int> inputs) {
  if (status.ok()) return status;
  const std::string& message = status.error_message();
  const auto renamed = [&](absl::string_view from, absl::string_view to) {
    return grpc::Status(status.error_code(),
                        absl::StrCat(to, message.substr(from.size())));
  };
  for (size_t k = 0; k < model.inputs.size(); ++k) {
    const absl::string_view native = model.inputs[k].native;
    if (inputs[k] < 0 || !StartsWithField(message, native)) continue;
    const std::string in = absl::StrCat("inputs[", inputs[k], "]");
    const std::string raw = absl::StrCat(native, ".raw");
    const std::string dtype = absl::StrCat(native, ".dtype");
    if (StartsWithField(message, raw)) {
      return renamed(raw, absl::StrCat("raw_input_contents[", inputs[k], "]"));
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
  RpcCall call(metrics_, Rpc::kServerMetadata);
  const absl::Status caller = auth_->Authenticate(*context).status();
  if (caller.ok()) {
    response->set_name("coalesce");
    response->set_version(version_);
    // Request parameters (the native models' options and arguments).
    response->add_extensions("parameters");
  }
  return Answer(context, call, caller, *request, *response);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context,
    const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  RpcCall call(metrics_, Rpc::kModelMetadata);
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

absl::Status InferenceService::Identity(ModelInferRequest& request,
                                        ModelInferResponse* response) {
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

namespace {

// The native request and response of one call, alive until its answer.
struct NativeCall {
  std::unique_ptr<google::protobuf::Message> native;
  std::unique_ptr<google::protobuf::Message> result;
  std::vector<int> inputs;  // each model input's index in the request
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
    if (request.raw_input_contents_size() > 0) {
      // Moved, not copied: the request is read no more.
      t->mutable_raw()->swap(*request.mutable_raw_input_contents(i));
    } else {
      // Typed contents exist only for FP32 (CheckInputData).
      const auto& values = in.contents().fp32_contents();
      t->mutable_raw()->assign(reinterpret_cast<const char*>(values.data()),
                               values.size() * sizeof(float));
    }
  }
  COALESCE_RETURN_IF_ERROR(OptionsToNative(
      request, static_cast<v1::ExecutionOptions*>(reflection->MutableMessage(
                   native, descriptor->FindFieldByName("options")))));
  // Other parameters are the client's business (the protocol lets clients
  // send ones a model ignores).
  return model.parameters(request, native);
}

// Moves result's outputs (those requested, or all) and report into
// response.
void NativeToResponse(const ModelSpec& model, const ModelInferRequest& request,
                      google::protobuf::Message& result,
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
    response->add_raw_output_contents()->swap(*t.mutable_raw());
  }
  const google::protobuf::FieldDescriptor* report =
      descriptor->FindFieldByName("report");
  if (reflection->HasField(result, report)) {
    ReportAsParameters(static_cast<const v1::KernelReport&>(
                           reflection->GetMessage(result, report)),
                       response);
  }
}

}  // namespace

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
  const absl::StatusOr<const ModelSpec*> model =
      CheckModel(request->model_name(), "model_name", request->model_version(),
                 "model_version");
  if (!model.ok()) return answer(model.status());
  // The inputs' bytes move out of the request (into the response or the
  // native request) instead of being copied: gRPC owns the message, which
  // is no const object, until the call ends, and nothing reads it after
  // this handler but the names of the requested outputs.
  ModelInferRequest& moving = const_cast<ModelInferRequest&>(*request);
  response->set_model_name(request->model_name());
  response->set_model_version(kVersion);
  response->set_id(request->id());
  if ((*model)->run == nullptr) return answer(Identity(moving, response));
  auto call = std::make_shared<NativeCall>();
  const absl::Status built = BuildNative(moving, **model, call.get());
  if (!built.ok()) return answer(built);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const ModelSpec* spec = *model;
  spec->run(ops_, context, std::move(caller), call->native.get(),
            call->result.get(),
            [call, reactor, request, response, spec](grpc::Status status) {
              if (status.ok()) {
                NativeToResponse(*spec, *request, *call->result, response);
              }
              reactor->Finish(InProtocolFields(status, *spec, call->inputs));
            });
  return reactor;
}

}  // namespace coalesce
