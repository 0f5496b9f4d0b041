// inference.GRPCInferenceService end to end: an in-process channel to a
// server built by BuildServer on the CPU backend, as the native service's
// tests do.
#include "server/frontend/kserve/service.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/server.h"

namespace coalesce {
namespace {

using inference::GRPCInferenceService;
using inference::ModelInferRequest;
using inference::ModelInferResponse;
using ::testing::HasSubstr;
using ::testing::StartsWith;

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// [..., M, N] -> [..., N, M], one element at a time.
std::string TransposeReference(const std::string& in,
                               const std::vector<int64_t>& shape,
                               size_t elem_size) {
  const int rank = static_cast<int>(shape.size());
  const int64_t rows = shape[rank - 2], cols = shape[rank - 1];
  const int64_t batch = Elements(shape) / (rows * cols);
  std::string out(in.size(), '\0');
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t from = (b * rows + r) * cols + c;
        const int64_t to = (b * cols + c) * rows + r;
        std::memcpy(&out[to * elem_size], &in[from * elem_size], elem_size);
      }
    }
  }
  return out;
}

std::string RandomBytes(int64_t n, std::mt19937* rng) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>((*rng)() & 0xff);
  return s;
}

// A transpose or identity request with INPUT0 as raw bytes.
ModelInferRequest RawRequest(const std::string& model,
                             const std::string& datatype,
                             const std::vector<int64_t>& shape,
                             std::string raw) {
  ModelInferRequest r;
  r.set_model_name(model);
  auto* in = r.add_inputs();
  in->set_name("INPUT0");
  in->set_datatype(datatype);
  for (int64_t d : shape) in->add_shape(d);
  r.add_raw_input_contents(std::move(raw));
  return r;
}

class InferenceServiceTest : public testing::Test {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend(2);
    ServerConfig config;
    config.listen = "";  // in-process only
    config.max_tensor_bytes = 16 << 20;
    absl::StatusOr<std::unique_ptr<RunningServer>> server =
        BuildServer(config, backend_.get(), "test: CreateCpuBackend(2)");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    channel_ = server_->InProcessChannel(args);
    stub_ = GRPCInferenceService::NewStub(channel_);
    native_ = v1::TensorOps::NewStub(channel_);
  }

  grpc::Status Infer(const ModelInferRequest& request,
                     ModelInferResponse* response) {
    grpc::ClientContext context;
    return stub_->ModelInfer(&context, request, response);
  }

  // The native Transpose of the same tensor.
  std::string NativeTranspose(v1::DataType dtype,
                              const std::vector<int64_t>& shape,
                              const std::string& raw) {
    v1::TransposeRequest request;
    request.mutable_input()->set_dtype(dtype);
    for (int64_t d : shape) request.mutable_input()->add_shape(d);
    request.mutable_input()->set_raw(raw);
    grpc::ClientContext context;
    v1::TransposeResponse response;
    const grpc::Status status =
        native_->Transpose(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.output().raw();
  }

  // Expects request to fail with code and a message starting with field.
  void ExpectError(const ModelInferRequest& request, grpc::StatusCode code,
                   const std::string& field) {
    ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_THAT(status.error_message(), StartsWith(field));
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RunningServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<GRPCInferenceService::Stub> stub_;
  std::unique_ptr<v1::TensorOps::Stub> native_;
  std::mt19937 rng_{20261203};
};

TEST_F(InferenceServiceTest, LiveReadyAndServerMetadata) {
  {
    grpc::ClientContext context;
    inference::ServerLiveResponse response;
    ASSERT_TRUE(
        stub_->ServerLive(&context, inference::ServerLiveRequest(), &response)
            .ok());
    EXPECT_TRUE(response.live());
  }
  {
    grpc::ClientContext context;
    inference::ServerReadyResponse response;
    ASSERT_TRUE(
        stub_->ServerReady(&context, inference::ServerReadyRequest(), &response)
            .ok());
    EXPECT_TRUE(response.ready());
  }
  grpc::ClientContext info_context;
  v1::GetServerInfoResponse info;
  ASSERT_TRUE(
      native_->GetServerInfo(&info_context, v1::GetServerInfoRequest(), &info)
          .ok());
  grpc::ClientContext context;
  inference::ServerMetadataResponse response;
  ASSERT_TRUE(stub_
                  ->ServerMetadata(&context, inference::ServerMetadataRequest(),
                                   &response)
                  .ok());
  EXPECT_EQ(response.name(), "coalesce");
  EXPECT_EQ(response.version(), info.build().version());
  EXPECT_THAT(response.extensions(),
              testing::ElementsAre("parameters", "model_configuration",
                                   "statistics", "system_shared_memory"));
}

TEST_F(InferenceServiceTest, ModelsAreReadyWithMetadata) {
  for (const char* model : {"identity", "transpose"}) {
    SCOPED_TRACE(model);
    for (const char* version : {"", "1"}) {
      grpc::ClientContext context;
      inference::ModelReadyRequest request;
      request.set_name(model);
      request.set_version(version);
      inference::ModelReadyResponse response;
      ASSERT_TRUE(stub_->ModelReady(&context, request, &response).ok());
      EXPECT_TRUE(response.ready());
    }
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name(model);
    inference::ModelMetadataResponse response;
    ASSERT_TRUE(stub_->ModelMetadata(&context, request, &response).ok());
    EXPECT_EQ(response.name(), model);
    EXPECT_THAT(response.versions(), testing::ElementsAre("1"));
    ASSERT_EQ(response.inputs_size(), 1);
    ASSERT_EQ(response.outputs_size(), 1);
    EXPECT_EQ(response.inputs(0).name(), "INPUT0");
    EXPECT_EQ(response.outputs(0).name(), "OUTPUT0");
    EXPECT_EQ(response.inputs(0).datatype(), "FP32");
    const std::vector<int64_t> wild = std::string(model) == "transpose"
                                          ? std::vector<int64_t>{-1, -1}
                                          : std::vector<int64_t>{-1};
    EXPECT_THAT(response.inputs(0).shape(), testing::ElementsAreArray(wild));
    EXPECT_THAT(response.outputs(0).shape(), testing::ElementsAreArray(wild));
  }
}

TEST_F(InferenceServiceTest, UnknownModelsAndVersionsAreNotFound) {
  {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name("resnet");
    inference::ModelReadyResponse response;
    const grpc::Status status = stub_->ModelReady(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(status.error_message(), StartsWith("name: "));
  }
  {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name("transpose");
    request.set_version("2");
    inference::ModelReadyResponse response;
    const grpc::Status status = stub_->ModelReady(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(status.error_message(), StartsWith("version: "));
  }
  {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name("resnet");
    inference::ModelMetadataResponse response;
    const grpc::Status status =
        stub_->ModelMetadata(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(status.error_message(), StartsWith("name: "));
  }
  ModelInferRequest request =
      RawRequest("resnet", "FP32", {2, 2}, std::string(16, '\0'));
  ExpectError(request, grpc::StatusCode::NOT_FOUND, "model_name: ");
  request.set_model_name("transpose");
  request.set_model_version("7");
  ExpectError(request, grpc::StatusCode::NOT_FOUND, "model_version: ");
}

TEST_F(InferenceServiceTest, IdentityReturnsItsInput) {
  // Any datatype and shape, raw bytes back as they came.
  const std::string raw = RandomBytes(2 * 3 * 5 * 8, &rng_);
  ModelInferRequest request = RawRequest("identity", "INT64", {2, 3, 5}, raw);
  request.set_id("req-1");
  request.add_outputs()->set_name("OUTPUT0");
  ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.model_name(), "identity");
  EXPECT_EQ(response.model_version(), "1");
  EXPECT_EQ(response.id(), "req-1");
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "OUTPUT0");
  EXPECT_EQ(response.outputs(0).datatype(), "INT64");
  EXPECT_THAT(response.outputs(0).shape(), testing::ElementsAre(2, 3, 5));
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), raw);

  // Typed contents come back as typed contents.
  ModelInferRequest typed;
  typed.set_model_name("identity");
  auto* in = typed.add_inputs();
  in->set_name("INPUT0");
  in->set_datatype("FP32");
  in->add_shape(3);
  for (float v : {1.5f, -2.0f, 3.25f})
    in->mutable_contents()->add_fp32_contents(v);
  ModelInferResponse typed_response;
  ASSERT_TRUE(Infer(typed, &typed_response).ok());
  ASSERT_EQ(typed_response.outputs_size(), 1);
  EXPECT_THAT(typed_response.outputs(0).contents().fp32_contents(),
              testing::ElementsAre(1.5f, -2.0f, 3.25f));
  EXPECT_EQ(typed_response.raw_output_contents_size(), 0);
}

TEST_F(InferenceServiceTest, TransposeIsExactAndEqualsTheNativeOne) {
  struct Case {
    std::string datatype;
    v1::DataType dtype;
    size_t bytes;
    std::vector<int64_t> shape;
  };
  const Case cases[] = {
      {"FP32", v1::DATA_TYPE_FLOAT32, 4, {17, 33}},
      {"FP32", v1::DATA_TYPE_FLOAT32, 4, {3, 17, 33}},
      {"BF16", v1::DATA_TYPE_BFLOAT16, 2, {19, 40}},
      {"BF16", v1::DATA_TYPE_BFLOAT16, 2, {2, 9, 70}},
      {"FP16", v1::DATA_TYPE_FLOAT16, 2, {5, 8}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.datatype, " rank ", c.shape.size()));
    // Any bit pattern: data movement must copy it exactly.
    const std::string raw = RandomBytes(Elements(c.shape) * c.bytes, &rng_);
    ModelInferResponse response;
    const grpc::Status status =
        Infer(RawRequest("transpose", c.datatype, c.shape, raw), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.outputs_size(), 1);
    EXPECT_EQ(response.outputs(0).name(), "OUTPUT0");
    EXPECT_EQ(response.outputs(0).datatype(), c.datatype);
    std::vector<int64_t> want_shape = c.shape;
    std::swap(want_shape[want_shape.size() - 2], want_shape.back());
    EXPECT_THAT(response.outputs(0).shape(),
                testing::ElementsAreArray(want_shape));
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    EXPECT_EQ(response.raw_output_contents(0),
              TransposeReference(raw, c.shape, c.bytes));
    EXPECT_EQ(response.raw_output_contents(0),
              NativeTranspose(c.dtype, c.shape, raw));
    EXPECT_EQ(response.parameters_size(), 0);  // no report unless asked
  }
}

TEST_F(InferenceServiceTest, TransposeTakesTypedFp32Contents) {
  ModelInferRequest request;
  request.set_model_name("transpose");
  auto* in = request.add_inputs();
  in->set_name("INPUT0");
  in->set_datatype("FP32");
  in->add_shape(2);
  in->add_shape(3);
  for (int i = 0; i < 6; ++i) in->mutable_contents()->add_fp32_contents(i);
  ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  std::vector<float> got(6);
  ASSERT_EQ(response.raw_output_contents(0).size(), sizeof(float) * 6);
  std::memcpy(got.data(), response.raw_output_contents(0).data(),
              sizeof(float) * 6);
  EXPECT_THAT(got, testing::ElementsAre(0, 3, 1, 4, 2, 5));
}

TEST_F(InferenceServiceTest, VariantAndReportParameters) {
  grpc::ClientContext info_context;
  v1::GetServerInfoResponse info;
  ASSERT_TRUE(
      native_->GetServerInfo(&info_context, v1::GetServerInfoRequest(), &info)
          .ok());
  std::string variant;
  for (const v1::VariantInfo& v : info.variants()) {
    if (v.op() == "transpose") variant = v.name();
  }
  ASSERT_FALSE(variant.empty());
  ModelInferRequest request =
      RawRequest("transpose", "FP32", {8, 16}, RandomBytes(8 * 16 * 4, &rng_));
  (*request.mutable_parameters())["variant"].set_string_param(variant);
  (*request.mutable_parameters())["report"].set_bool_param(true);
  ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const auto& params = response.parameters();
  ASSERT_TRUE(params.contains("report.variant"));
  EXPECT_EQ(params.at("report.variant").string_param(), variant);
  EXPECT_EQ(params.at("report.backend").string_param(), "cpu");
  EXPECT_EQ(params.at("report.bytes_moved").int64_param(), 2 * 8 * 16 * 4);
  EXPECT_EQ(params.at("report.batch_size").int64_param(), 1);

  (*request.mutable_parameters())["variant"].set_int64_param(3);
  ExpectError(request, grpc::StatusCode::INVALID_ARGUMENT,
              "parameters.variant: ");
  (*request.mutable_parameters())["variant"].set_string_param("no.such");
  ExpectError(request, grpc::StatusCode::INVALID_ARGUMENT,
              "parameters.variant");
  request.mutable_parameters()->erase("variant");
  (*request.mutable_parameters())["report"].set_string_param("yes");
  ExpectError(request, grpc::StatusCode::INVALID_ARGUMENT,
              "parameters.report: ");
}

TEST_F(InferenceServiceTest, BadRequestsNameTheirField) {
  const auto transpose = [&](const std::string& datatype,
                             const std::vector<int64_t>& shape) {
    const size_t bytes = datatype == "FP32" ? 4 : 2;
    return RawRequest("transpose", datatype, shape,
                      std::string(Elements(shape) * bytes, '\0'));
  };
  const grpc::StatusCode invalid = grpc::StatusCode::INVALID_ARGUMENT;
  // Wrong datatype: one the protocol knows, and one it does not.
  ExpectError(transpose("INT32", {2, 2}), invalid, "inputs[0].datatype: ");
  ExpectError(transpose("FP33", {2, 2}), invalid, "inputs[0].datatype: ");
  ExpectError(RawRequest("identity", "FP33", {1}, "abcd"), invalid,
              "inputs[0].datatype: ");
  // Wrong shape: rank, a zero and a negative dimension.
  ExpectError(transpose("FP32", {8}), invalid, "inputs[0].shape: ");
  ExpectError(transpose("FP32", {1, 2, 3, 4}), invalid, "inputs[0].shape: ");
  ExpectError(transpose("FP32", {4, 0}), invalid, "inputs[0].shape[1]: ");
  ExpectError(RawRequest("transpose", "FP32", {-1, 4}, ""), invalid,
              "inputs[0].shape[0]: ");
  // Missing, unknown and repeated inputs; unknown outputs.
  ModelInferRequest none;
  none.set_model_name("transpose");
  ExpectError(none, invalid, "inputs: ");
  ModelInferRequest renamed = transpose("FP32", {2, 2});
  renamed.mutable_inputs(0)->set_name("x");
  ExpectError(renamed, invalid, "inputs[0].name: ");
  ModelInferRequest twice = transpose("FP32", {2, 2});
  *twice.add_inputs() = twice.inputs(0);
  twice.add_raw_input_contents(twice.raw_input_contents(0));
  ExpectError(twice, invalid, "inputs[1].name: ");
  ModelInferRequest output = transpose("FP32", {2, 2});
  output.add_outputs()->set_name("OUTPUT1");
  ExpectError(output, invalid, "outputs[0].name: ");
  // Raw contents of the wrong size, or not one per input.
  ModelInferRequest short_raw = transpose("BF16", {3, 5});
  short_raw.mutable_raw_input_contents(0)->resize(29);
  ExpectError(short_raw, invalid, "raw_input_contents[0]: ");
  ModelInferRequest extra_raw = transpose("FP32", {2, 2});
  extra_raw.add_raw_input_contents("");
  ExpectError(extra_raw, invalid, "raw_input_contents: ");
  ModelInferRequest identity_short =
      RawRequest("identity", "INT16", {3}, "abcde");
  ExpectError(identity_short, invalid, "raw_input_contents[0]: ");
  // Typed contents: miscounted, none for BF16, or beside raw contents.
  ModelInferRequest typed = transpose("FP32", {2, 2});
  typed.clear_raw_input_contents();
  typed.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
  ExpectError(typed, invalid, "inputs[0].contents: ");
  ModelInferRequest typed_bf16 = transpose("BF16", {1, 1});
  typed_bf16.clear_raw_input_contents();
  ExpectError(typed_bf16, invalid, "inputs[0].contents: ");
  ModelInferRequest both = transpose("FP32", {1, 1});
  both.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
  ExpectError(both, invalid, "inputs[0].contents: ");
}

// count random floats in [-1, 1) as FP32 (4 bytes each) or, truncated, as
// BF16 (2 bytes each); never zeros.
std::string RandomValues(int64_t count, const std::string& datatype,
                         std::mt19937* rng) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const size_t bytes = datatype == "FP32" ? 4 : 2;
  std::string s(count * bytes, '\0');
  for (int64_t i = 0; i < count; ++i) {
    float f = value(*rng);
    if (f == 0.0f) f = 0.5f;
    // Little-endian: BF16 is the float's upper half.
    std::memcpy(&s[i * bytes], reinterpret_cast<const char*>(&f) + 4 - bytes,
                bytes);
  }
  return s;
}

// Adds input name of datatype and shape with random values to r, and sets
// the same tensor in native (when given).
void AddInput(ModelInferRequest* r, const std::string& name,
              const std::string& datatype, const std::vector<int64_t>& shape,
              std::mt19937* rng, v1::Tensor* native) {
  auto* in = r->add_inputs();
  in->set_name(name);
  in->set_datatype(datatype);
  for (int64_t d : shape) in->add_shape(d);
  std::string raw = RandomValues(Elements(shape), datatype, rng);
  if (native != nullptr) {
    native->set_dtype(datatype == "FP32" ? v1::DATA_TYPE_FLOAT32
                                         : v1::DATA_TYPE_BFLOAT16);
    for (int64_t d : shape) native->add_shape(d);
    native->set_raw(raw);
  }
  r->add_raw_input_contents(std::move(raw));
}

void SetParameter(ModelInferRequest* r, const std::string& name,
                  const std::string& value) {
  (*r->mutable_parameters())[name].set_string_param(value);
}
void SetParameter(ModelInferRequest* r, const std::string& name, bool value) {
  (*r->mutable_parameters())[name].set_bool_param(value);
}
void SetParameter(ModelInferRequest* r, const std::string& name, double value) {
  (*r->mutable_parameters())[name].set_double_param(value);
}
void SetParameter(ModelInferRequest* r, const std::string& name,
                  int64_t value) {
  (*r->mutable_parameters())[name].set_int64_param(value);
}

// Expects response's output i to be named name with the native tensor's
// datatype, shape and bytes.
void ExpectOutput(const ModelInferResponse& response, int i,
                  const std::string& name, const std::string& datatype,
                  const v1::Tensor& native) {
  ASSERT_GT(response.outputs_size(), i);
  ASSERT_EQ(response.raw_output_contents_size(), response.outputs_size());
  EXPECT_EQ(response.outputs(i).name(), name);
  EXPECT_EQ(response.outputs(i).datatype(), datatype);
  EXPECT_THAT(response.outputs(i).shape(),
              testing::ElementsAreArray(native.shape()));
  ASSERT_FALSE(native.raw().empty());
  EXPECT_TRUE(response.raw_output_contents(i) == native.raw())
      << name << " differs from the native RPC's";
}

TEST_F(InferenceServiceTest, NewModelsAreReadyWithMetadata) {
  const struct {
    const char* model;
    std::vector<std::string> inputs, outputs;
  } models[] = {
      {"convert_layout", {"INPUT0"}, {"OUTPUT0"}},
      {"gelu_layer_norm",
       {"x", "bias", "residual", "gamma", "beta"},
       {"y", "h"}},
      {"gemm", {"a", "b", "c"}, {"d"}},
  };
  for (const auto& m : models) {
    SCOPED_TRACE(m.model);
    {
      grpc::ClientContext context;
      inference::ModelReadyRequest request;
      request.set_name(m.model);
      inference::ModelReadyResponse response;
      ASSERT_TRUE(stub_->ModelReady(&context, request, &response).ok());
      EXPECT_TRUE(response.ready());
    }
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name(m.model);
    inference::ModelMetadataResponse response;
    ASSERT_TRUE(stub_->ModelMetadata(&context, request, &response).ok());
    EXPECT_EQ(response.name(), m.model);
    ASSERT_EQ(response.inputs_size(), static_cast<int>(m.inputs.size()));
    ASSERT_EQ(response.outputs_size(), static_cast<int>(m.outputs.size()));
    for (int i = 0; i < response.inputs_size(); ++i) {
      EXPECT_EQ(response.inputs(i).name(), m.inputs[i]);
      EXPECT_EQ(response.inputs(i).datatype(), "FP32");
      EXPECT_THAT(response.inputs(i).shape(), testing::Each(-1));
      EXPECT_FALSE(response.inputs(i).shape().empty());
    }
    for (int i = 0; i < response.outputs_size(); ++i) {
      EXPECT_EQ(response.outputs(i).name(), m.outputs[i]);
      EXPECT_EQ(response.outputs(i).datatype(), "FP32");
      EXPECT_THAT(response.outputs(i).shape(), testing::Each(-1));
    }
  }
}

TEST_F(InferenceServiceTest, ConvertLayoutEqualsTheNativeOne) {
  const struct {
    std::string datatype;
    std::vector<int64_t> shape;
    std::function<void(ModelInferRequest*, v1::ConvertLayoutRequest*)> set;
  } cases[] = {
      {"FP32",
       {2, 3, 4, 5},
       [](ModelInferRequest* r, v1::ConvertLayoutRequest* n) {
         SetParameter(r, "layout_from", std::string("NCHW"));
         SetParameter(r, "layout_to", std::string("NHWC"));
         n->mutable_layouts()->set_from(v1::LAYOUT_NCHW);
         n->mutable_layouts()->set_to(v1::LAYOUT_NHWC);
       }},
      {"BF16",
       {2, 4, 5, 3},
       [](ModelInferRequest* r, v1::ConvertLayoutRequest* n) {
         SetParameter(r, "layout_from", std::string("NHWC"));
         SetParameter(r, "layout_to", std::string("NCHW"));
         n->mutable_layouts()->set_from(v1::LAYOUT_NHWC);
         n->mutable_layouts()->set_to(v1::LAYOUT_NCHW);
       }},
      {"FP32",
       {2, 3, 4, 5},
       [](ModelInferRequest* r, v1::ConvertLayoutRequest* n) {
         SetParameter(r, "permutation", std::string("0,2,3,1"));
         for (int p : {0, 2, 3, 1}) n->mutable_permutation()->add_perm(p);
       }},
      {"FP32",
       {7, 3},
       [](ModelInferRequest* r, v1::ConvertLayoutRequest* n) {
         SetParameter(r, "aos_soa", std::string("aos_to_soa"));
         SetParameter(r, "fields", int64_t{3});
         n->mutable_aos_soa()->set_direction(v1::AosSoa::DIRECTION_AOS_TO_SOA);
         n->mutable_aos_soa()->set_fields(3);
       }},
      {"FP32",
       {3, 7},
       [](ModelInferRequest* r, v1::ConvertLayoutRequest* n) {
         SetParameter(r, "aos_soa", std::string("soa_to_aos"));
         n->mutable_aos_soa()->set_direction(v1::AosSoa::DIRECTION_SOA_TO_AOS);
       }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::PrintToString(c.shape));
    ModelInferRequest request;
    request.set_model_name("convert_layout");
    v1::ConvertLayoutRequest native;
    AddInput(&request, "INPUT0", c.datatype, c.shape, &rng_,
             native.mutable_input());
    c.set(&request, &native);
    v1::ConvertLayoutResponse expected;
    {
      grpc::ClientContext context;
      ASSERT_TRUE(native_->ConvertLayout(&context, native, &expected).ok());
    }
    ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.outputs_size(), 1);
    ExpectOutput(response, 0, "OUTPUT0", c.datatype, expected.output());
  }
}

TEST_F(InferenceServiceTest, GeluLayerNormEqualsTheNativeOne) {
  for (const std::string datatype : {"FP32", "BF16"}) {
    SCOPED_TRACE(datatype);
    ModelInferRequest request;
    request.set_model_name("gelu_layer_norm");
    v1::GeluLayerNormRequest native;
    AddInput(&request, "x", datatype, {5, 48}, &rng_, native.mutable_x());
    AddInput(&request, "bias", datatype, {48}, &rng_, native.mutable_bias());
    AddInput(&request, "residual", datatype, {5, 48}, &rng_,
             native.mutable_residual());
    AddInput(&request, "gamma", datatype, {48}, &rng_, native.mutable_gamma());
    AddInput(&request, "beta", datatype, {48}, &rng_, native.mutable_beta());
    SetParameter(&request, "epsilon", 1e-3);
    SetParameter(&request, "approximation", std::string("tanh"));
    SetParameter(&request, "return_pre_norm", true);
    native.set_epsilon(1e-3f);
    native.set_approximation(v1::GELU_APPROXIMATION_TANH);
    native.set_return_pre_norm(true);
    v1::GeluLayerNormResponse expected;
    {
      grpc::ClientContext context;
      ASSERT_TRUE(native_->GeluLayerNorm(&context, native, &expected).ok());
    }
    ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.outputs_size(), 2);
    ExpectOutput(response, 0, "y", datatype, expected.y());
    ExpectOutput(response, 1, "h", datatype, expected.h());
  }
  // x alone, the defaults: y only.
  ModelInferRequest request;
  request.set_model_name("gelu_layer_norm");
  v1::GeluLayerNormRequest native;
  AddInput(&request, "x", "FP32", {3, 2, 32}, &rng_, native.mutable_x());
  v1::GeluLayerNormResponse expected;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(native_->GeluLayerNorm(&context, native, &expected).ok());
  }
  ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  ExpectOutput(response, 0, "y", "FP32", expected.y());
}

TEST_F(InferenceServiceTest, GeluLayerNormReturnsTheOutputsAskedFor) {
  ModelInferRequest request;
  request.set_model_name("gelu_layer_norm");
  v1::GeluLayerNormRequest native;
  AddInput(&request, "x", "FP32", {4, 40}, &rng_, native.mutable_x());
  native.set_return_pre_norm(true);
  v1::GeluLayerNormResponse expected;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(native_->GeluLayerNorm(&context, native, &expected).ok());
  }
  // h alone: computed without return_pre_norm, and y left out.
  request.add_outputs()->set_name("h");
  ModelInferResponse response;
  grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  ExpectOutput(response, 0, "h", "FP32", expected.h());
  // y only, though return_pre_norm computes h too.
  request.mutable_outputs(0)->set_name("y");
  SetParameter(&request, "return_pre_norm", true);
  response.Clear();
  status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  ExpectOutput(response, 0, "y", "FP32", expected.y());
  // h asked for, but return_pre_norm false.
  request.mutable_outputs(0)->set_name("h");
  SetParameter(&request, "return_pre_norm", false);
  ExpectError(request, grpc::StatusCode::INVALID_ARGUMENT,
              "parameters.return_pre_norm: ");
}

TEST_F(InferenceServiceTest, GemmEqualsTheNativeOne) {
  for (const std::string datatype : {"FP32", "BF16"}) {
    SCOPED_TRACE(datatype);
    ModelInferRequest request;
    request.set_model_name("gemm");
    v1::GemmRequest native;
    AddInput(&request, "a", datatype, {13, 9}, &rng_, native.mutable_a());
    AddInput(&request, "b", datatype, {11, 9}, &rng_, native.mutable_b());
    AddInput(&request, "c", datatype, {13, 11}, &rng_, native.mutable_c());
    SetParameter(&request, "alpha", 0.5);
    SetParameter(&request, "beta", 2.0);
    SetParameter(&request, "trans_b", true);
    SetParameter(&request, "allow_tf32", false);
    native.set_alpha(0.5f);
    native.set_beta(2.0f);
    native.set_trans_b(true);
    v1::GemmResponse expected;
    {
      grpc::ClientContext context;
      ASSERT_TRUE(native_->Gemm(&context, native, &expected).ok());
    }
    ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.outputs_size(), 1);
    ExpectOutput(response, 0, "d", datatype, expected.d());
  }
  // a transposed, no c, default alpha; the report as parameters.
  ModelInferRequest request;
  request.set_model_name("gemm");
  v1::GemmRequest native;
  AddInput(&request, "a", "FP32", {6, 4}, &rng_, native.mutable_a());
  AddInput(&request, "b", "FP32", {6, 5}, &rng_, native.mutable_b());
  SetParameter(&request, "trans_a", true);
  SetParameter(&request, "report", true);
  native.set_trans_a(true);
  v1::GemmResponse expected;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(native_->Gemm(&context, native, &expected).ok());
  }
  ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectOutput(response, 0, "d", "FP32", expected.d());
  EXPECT_THAT(response.outputs(0).shape(), testing::ElementsAre(4, 5));
  EXPECT_TRUE(response.parameters().contains("report.variant"));
}

TEST_F(InferenceServiceTest, NewModelsNameTheFieldOfAnError) {
  const grpc::StatusCode invalid = grpc::StatusCode::INVALID_ARGUMENT;
  const auto gemm = [&](bool with_c) {
    ModelInferRequest r;
    r.set_model_name("gemm");
    AddInput(&r, "a", "FP32", {2, 3}, &rng_, nullptr);
    AddInput(&r, "b", "FP32", {3, 4}, &rng_, nullptr);
    if (with_c) AddInput(&r, "c", "FP32", {2, 4}, &rng_, nullptr);
    return r;
  };
  ModelInferRequest no_b;
  no_b.set_model_name("gemm");
  AddInput(&no_b, "a", "FP32", {2, 3}, &rng_, nullptr);
  ExpectError(no_b, invalid, "inputs: missing input b");
  ModelInferRequest alpha = gemm(true);
  SetParameter(&alpha, "alpha", std::string("half"));
  ExpectError(alpha, invalid, "parameters.alpha: ");
  ModelInferRequest trans = gemm(true);
  SetParameter(&trans, "trans_a", int64_t{1});
  ExpectError(trans, invalid, "parameters.trans_a: ");
  // The native codec's errors, in the protocol's names.
  ModelInferRequest beta = gemm(false);
  SetParameter(&beta, "beta", 2.0);
  ExpectError(beta, invalid, "parameters.beta: ");
  ModelInferRequest k = gemm(true);
  k.mutable_inputs(1)->set_shape(0, 2);
  k.mutable_inputs(1)->set_shape(1, 6);
  ExpectError(k, invalid, "inputs[1].shape[0]: ");
  ModelInferRequest mixed = gemm(true);
  mixed.mutable_inputs(2)->set_datatype("BF16");
  mixed.mutable_raw_input_contents(2)->resize(16);
  ExpectError(mixed, invalid, "inputs[2].datatype: ");

  const auto layout = [&]() {
    ModelInferRequest r;
    r.set_model_name("convert_layout");
    AddInput(&r, "INPUT0", "FP32", {1, 2, 3, 4}, &rng_, nullptr);
    return r;
  };
  ExpectError(layout(), invalid, "parameters.layout_from: ");
  ModelInferRequest conflict = layout();
  SetParameter(&conflict, "layout_from", std::string("NCHW"));
  SetParameter(&conflict, "layout_to", std::string("NHWC"));
  SetParameter(&conflict, "permutation", std::string("0,2,3,1"));
  ExpectError(conflict, invalid, "parameters.permutation: ");
  ModelInferRequest half = layout();
  SetParameter(&half, "layout_from", std::string("NCHW"));
  ExpectError(half, invalid, "parameters.layout_to: ");
  ModelInferRequest bad_layout = layout();
  SetParameter(&bad_layout, "layout_from", std::string("NCHW"));
  SetParameter(&bad_layout, "layout_to", std::string("CHWN"));
  ExpectError(bad_layout, invalid, "parameters.layout_to: ");
  ModelInferRequest same = layout();
  SetParameter(&same, "layout_from", std::string("NCHW"));
  SetParameter(&same, "layout_to", std::string("NCHW"));
  ExpectError(same, invalid, "parameters.layout_to: ");
  ModelInferRequest words = layout();
  SetParameter(&words, "permutation", std::string("0,two,3,1"));
  ExpectError(words, invalid, "parameters.permutation: ");
  ModelInferRequest range = layout();
  SetParameter(&range, "permutation", std::string("0,1,2,7"));
  ExpectError(range, invalid, "parameters.permutation[3]: ");
  ModelInferRequest direction = layout();
  SetParameter(&direction, "aos_soa", std::string("sideways"));
  ExpectError(direction, invalid, "parameters.aos_soa: ");
  ModelInferRequest fields = layout();
  fields.mutable_inputs(0)->clear_shape();
  fields.mutable_inputs(0)->add_shape(8);
  fields.mutable_inputs(0)->add_shape(3);
  SetParameter(&fields, "aos_soa", std::string("aos_to_soa"));
  SetParameter(&fields, "fields", int64_t{5});
  ExpectError(fields, invalid, "parameters.fields: ");

  const auto gelu = [&]() {
    ModelInferRequest r;
    r.set_model_name("gelu_layer_norm");
    AddInput(&r, "x", "FP32", {2, 8}, &rng_, nullptr);
    return r;
  };
  ModelInferRequest no_x;
  no_x.set_model_name("gelu_layer_norm");
  AddInput(&no_x, "bias", "FP32", {8}, &rng_, nullptr);
  ExpectError(no_x, invalid, "inputs: missing input x");
  ModelInferRequest approximation = gelu();
  SetParameter(&approximation, "approximation", std::string("fast"));
  ExpectError(approximation, invalid, "parameters.approximation: ");
  ModelInferRequest epsilon = gelu();
  SetParameter(&epsilon, "epsilon", -1.0);
  ExpectError(epsilon, invalid, "parameters.epsilon: ");
  ModelInferRequest pre_norm = gelu();
  SetParameter(&pre_norm, "return_pre_norm", std::string("yes"));
  ExpectError(pre_norm, invalid, "parameters.return_pre_norm: ");
  ModelInferRequest bias = gelu();
  AddInput(&bias, "bias", "FP32", {7}, &rng_, nullptr);
  ExpectError(bias, invalid, "inputs[1].shape: ");
  ModelInferRequest output = gelu();
  output.add_outputs()->set_name("OUTPUT0");
  ExpectError(output, invalid, "outputs[0].name: ");
}

// Each RPC is counted once: a transpose as the native op it runs, the
// rest under their own names.
TEST_F(InferenceServiceTest, EveryRpcIsReportedToTheMetrics) {
  {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name("identity");
    inference::ModelReadyResponse response;
    ASSERT_TRUE(stub_->ModelReady(&context, request, &response).ok());
  }
  ModelInferResponse response;
  ASSERT_TRUE(
      Infer(RawRequest("identity", "UINT8", {4}, "abcd"), &response).ok());
  response.Clear();
  ASSERT_TRUE(
      Infer(RawRequest("transpose", "FP32", {2, 2}, std::string(16, '\0')),
            &response)
          .ok());
  response.Clear();
  EXPECT_FALSE(
      Infer(RawRequest("resnet", "FP32", {1}, "abcd"), &response).ok());
  const std::string text = server_->registry->Serialize();
  for (const char* series : {
           "coalesce_requests_total{code=\"OK\",op=\"kserve_model_ready\"} 1",
           "coalesce_requests_total{code=\"OK\",op=\"kserve_model_infer\"} 1",
           "coalesce_requests_total{code=\"NOT_FOUND\",op=\"kserve_model_"
           "infer\"} 1",
           "coalesce_requests_total{code=\"OK\",op=\"transpose\"} 1",
           "coalesce_requests_in_flight{op=\"kserve_model_infer\"} 0",
       }) {
    EXPECT_THAT(text, HasSubstr(series));
  }
}

// Random FP32 values as raw bytes.
std::string RandomFloats(int64_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::string s(n * sizeof(float), '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = dist(*rng);
    std::memcpy(&s[i * sizeof(float)], &v, sizeof(float));
  }
  return s;
}

TEST_F(InferenceServiceTest, StreamAnswersEveryRequestInOrderPastAnError) {
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  struct Sent {
    ModelInferRequest request;
    std::string expected;  // empty: an error, naming expected_field
    std::string expected_field;
  };
  std::vector<Sent> sent;
  for (int i = 0; i < 5; ++i) {
    const std::vector<int64_t> shape = {3 + i, 5};
    const std::string raw = RandomFloats(Elements(shape), &rng_);
    Sent s;
    if (i == 2) {
      // Four bytes short: refused, naming the field.
      s.request = RawRequest("transpose", "FP32", shape, raw.substr(4));
      s.expected_field = "raw_input_contents[0]";
    } else if (i == 3) {
      s.request = RawRequest("identity", "FP32", shape, raw);
      s.expected = raw;
    } else {
      s.request = RawRequest("transpose", "FP32", shape, raw);
      s.expected = TransposeReference(raw, shape, 4);
    }
    s.request.set_id(absl::StrCat("request-", i));
    sent.push_back(std::move(s));
  }
  // The responses are read while the requests are written, as a client
  // must: a stream's writes complete only as the other side reads them.
  std::vector<inference::ModelStreamInferResponse> responses;
  std::thread reader([&] {
    inference::ModelStreamInferResponse r;
    while (stream->Read(&r)) responses.push_back(r);
  });
  for (const Sent& s : sent) EXPECT_TRUE(stream->Write(s.request));
  EXPECT_TRUE(stream->WritesDone());
  reader.join();
  ASSERT_EQ(responses.size(), sent.size());
  for (size_t k = 0; k < sent.size(); ++k) {
    const Sent& s = sent[k];
    const inference::ModelStreamInferResponse& response = responses[k];
    SCOPED_TRACE(s.request.id());
    EXPECT_EQ(response.infer_response().id(), s.request.id());
    if (s.expected.empty()) {
      EXPECT_THAT(response.error_message(), StartsWith(s.expected_field));
      EXPECT_EQ(response.infer_response().raw_output_contents_size(), 0);
      continue;
    }
    EXPECT_EQ(response.error_message(), "");
    ASSERT_EQ(response.infer_response().raw_output_contents_size(), 1);
    EXPECT_EQ(response.infer_response().raw_output_contents(0), s.expected);
  }
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(InferenceServiceTest, StreamEndsWhenTheClientCancels) {
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  const std::vector<int64_t> shape = {4, 6};
  const std::string raw = RandomFloats(Elements(shape), &rng_);
  ASSERT_TRUE(stream->Write(RawRequest("transpose", "FP32", shape, raw)));
  inference::ModelStreamInferResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.infer_response().raw_output_contents(0),
            TransposeReference(raw, shape, 4));
  context.TryCancel();
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(InferenceServiceTest, ModelConfigDescribesEachModel) {
  grpc::ClientContext context;
  inference::ModelConfigRequest request;
  request.set_name("gelu_layer_norm");
  inference::ModelConfigResponse response;
  grpc::Status status = stub_->ModelConfig(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const inference::ModelConfig& config = response.config();
  EXPECT_EQ(config.name(), "gelu_layer_norm");
  EXPECT_EQ(config.platform(), "coalesce");
  EXPECT_EQ(config.max_batch_size(), 0);
  ASSERT_EQ(config.input_size(), 5);
  EXPECT_EQ(config.input(0).name(), "x");
  EXPECT_EQ(config.input(0).data_type(), inference::TYPE_FP32);
  EXPECT_THAT(config.input(0).dims(), testing::ElementsAre(-1, -1));
  EXPECT_FALSE(config.input(0).optional());
  EXPECT_EQ(config.input(1).name(), "bias");
  EXPECT_TRUE(config.input(1).optional());
  ASSERT_EQ(config.output_size(), 2);
  EXPECT_EQ(config.output(1).name(), "h");
  EXPECT_THAT(config.output(1).dims(), testing::ElementsAre(-1, -1));

  grpc::ClientContext unknown_context;
  request.set_name("resnet");
  status = stub_->ModelConfig(&unknown_context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), StartsWith("name: "));
}

TEST_F(InferenceServiceTest, RepositoryIndexListsEveryModelReady) {
  grpc::ClientContext context;
  inference::RepositoryIndexRequest request;
  request.set_ready(true);
  inference::RepositoryIndexResponse response;
  grpc::Status status = stub_->RepositoryIndex(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<std::string> names;
  for (const auto& m : response.models()) {
    names.push_back(m.name());
    EXPECT_EQ(m.version(), "1");
    EXPECT_EQ(m.state(), "READY");
  }
  EXPECT_THAT(names,
              testing::ElementsAre("identity", "transpose", "convert_layout",
                                   "gelu_layer_norm", "gemm"));
  grpc::ClientContext other_context;
  request.set_repository_name("elsewhere");
  status = stub_->RepositoryIndex(&other_context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), StartsWith("repository_name: "));
}

TEST_F(InferenceServiceTest, StatisticsCountWhatRequestsDid) {
  const auto stats = [&](const std::string& name) {
    grpc::ClientContext context;
    inference::ModelStatisticsRequest request;
    request.set_name(name);
    inference::ModelStatisticsResponse response;
    const grpc::Status status =
        stub_->ModelStatistics(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.model_stats_size(), name.empty() ? 5 : 1);
    return response;
  };
  const inference::ModelStatistics before = stats("transpose").model_stats(0);
  EXPECT_EQ(before.name(), "transpose");
  EXPECT_EQ(before.inference_count(), 0);
  EXPECT_EQ(before.inference_stats().fail().count(), 0);
  EXPECT_EQ(before.last_inference(), 0);

  constexpr int kGood = 3;
  for (int i = 0; i < kGood; ++i) {
    const std::vector<int64_t> shape = {8 + i, 16};
    ModelInferResponse response;
    const grpc::Status status =
        Infer(RawRequest("transpose", "FP32", shape,
                         RandomFloats(Elements(shape), &rng_)),
              &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  // One refused by the front end, one by the native op (no such variant).
  ModelInferResponse response;
  EXPECT_FALSE(
      Infer(RawRequest("transpose", "FP32", {2, 2}, "short"), &response).ok());
  ModelInferRequest forced =
      RawRequest("transpose", "FP32", {2, 2}, RandomFloats(4, &rng_));
  (*forced.mutable_parameters())["variant"].set_string_param("no_such");
  EXPECT_FALSE(Infer(forced, &response).ok());
  // A streamed request counts like a unary one.
  {
    grpc::ClientContext context;
    auto stream = stub_->ModelStreamInfer(&context);
    ASSERT_TRUE(stream->Write(
        RawRequest("transpose", "FP32", {4, 4}, RandomFloats(16, &rng_))));
    ASSERT_TRUE(stream->WritesDone());
    inference::ModelStreamInferResponse streamed;
    ASSERT_TRUE(stream->Read(&streamed));
    EXPECT_EQ(streamed.error_message(), "");
    ASSERT_TRUE(stream->Finish().ok());
  }

  const inference::ModelStatistics after = stats("transpose").model_stats(0);
  const inference::InferStatistics& s = after.inference_stats();
  EXPECT_EQ(after.inference_count(), kGood + 1);
  EXPECT_EQ(after.execution_count(), kGood + 1);  // one at a time: no batch
  EXPECT_GT(after.last_inference(), 0);
  EXPECT_EQ(s.success().count(), kGood + 1);
  EXPECT_GT(s.success().ns(), 0);
  EXPECT_EQ(s.fail().count(), 2);
  EXPECT_GT(s.fail().ns(), 0);
  for (const inference::StatisticDuration* d :
       {&s.queue(), &s.compute_input(), &s.compute_infer(),
        &s.compute_output()}) {
    EXPECT_EQ(d->count(), kGood + 1);
  }
  EXPECT_GT(s.compute_infer().ns(), 0);
  // The phases lie within the requests' whole time.
  EXPECT_LE(s.queue().ns() + s.compute_input().ns() + s.compute_infer().ns() +
                s.compute_output().ns(),
            s.success().ns());
  ASSERT_EQ(after.batch_stats_size(), 1);
  EXPECT_EQ(after.batch_stats(0).batch_size(), 1);
  EXPECT_EQ(after.batch_stats(0).compute_infer().count(), kGood + 1);
  EXPECT_EQ(after.batch_stats(0).compute_infer().ns(), s.compute_infer().ns());

  // The other models saw none of it; all of them are listed.
  const inference::ModelStatisticsResponse all = stats("");
  for (const inference::ModelStatistics& m : all.model_stats()) {
    if (m.name() == "transpose") {
      EXPECT_EQ(m.inference_count(), kGood + 1);
    } else {
      EXPECT_EQ(m.inference_count(), 0) << m.name();
    }
  }
  ASSERT_TRUE(
      Infer(RawRequest("identity", "UINT8", {3}, "xyz"), &response).ok());
  const inference::ModelStatistics identity = stats("identity").model_stats(0);
  EXPECT_EQ(identity.inference_count(), 1);
  EXPECT_EQ(identity.execution_count(), 1);
  // identity runs no kernel and waits in no queue: counted there with 0 ns.
  EXPECT_EQ(identity.inference_stats().queue().count(), 1);
  EXPECT_EQ(identity.inference_stats().queue().ns(), 0);
  EXPECT_EQ(identity.inference_stats().compute_infer().count(), 1);

  grpc::ClientContext context;
  inference::ModelStatisticsRequest unknown;
  unknown.set_name("resnet");
  inference::ModelStatisticsResponse unknown_response;
  const grpc::Status status =
      stub_->ModelStatistics(&context, unknown, &unknown_response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), StartsWith("name: "));
}

TEST_F(InferenceServiceTest, SharedMemoryIsOffByDefaultAndCudaNeedsCuda) {
  {
    grpc::ClientContext context;
    inference::SystemSharedMemoryRegisterRequest request;
    request.set_name("r");
    request.set_key("/coalesce-kserve-off");
    request.set_byte_size(64);
    inference::SystemSharedMemoryRegisterResponse response;
    const grpc::Status status =
        stub_->SystemSharedMemoryRegister(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr("--allow_client_shm"));
  }
  grpc::ClientContext context;
  inference::CudaSharedMemoryRegisterRequest request;
  request.set_name("r");
  request.set_raw_handle(std::string(64, 'h'));
  request.set_byte_size(64);
  inference::CudaSharedMemoryRegisterResponse response;
  const grpc::Status status =
      stub_->CudaSharedMemoryRegister(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("CUDA shared memory needs the CUDA backend"));
  {
    grpc::ClientContext context;
    inference::CudaSharedMemoryStatusResponse listed;
    EXPECT_TRUE(stub_->CudaSharedMemoryStatus(&context, {}, &listed).ok());
    EXPECT_TRUE(listed.regions().empty());
  }
  grpc::ClientContext unregister_context;
  inference::CudaSharedMemoryUnregisterRequest unregister;
  unregister.set_name("r");
  inference::CudaSharedMemoryUnregisterResponse unregistered;
  const grpc::Status missing = stub_->CudaSharedMemoryUnregister(
      &unregister_context, unregister, &unregistered);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(missing.error_message(), HasSubstr("CUDA shared-memory region"));
}

// A POSIX shared-memory object owned by a test.
class Shm {
 public:
  Shm(std::string key, int64_t bytes) : key_(std::move(key)), bytes_(bytes) {
    shm_unlink(key_.c_str());
    fd_ = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, bytes), 0);
    data_ = static_cast<char*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
  }
  ~Shm() {
    munmap(data_, bytes_);
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  char* data() const { return data_; }

 private:
  std::string key_;
  int64_t bytes_;
  int fd_ = -1;
  char* data_ = nullptr;
};

// A server with shared memory on, reached over its local socket (where
// the server learns the caller's uid, which registering needs), by two
// clients of different identities.
class InferenceSharedMemoryTest : public testing::Test {
 protected:
  static constexpr int64_t kObjectBytes = 8192;
  static constexpr uint64_t kRegionBytes = 4096;

  void SetUp() override {
    backend_ = CreateCpuBackend(2);
    ServerConfig config;
    config.listen = "127.0.0.1:0";
    socket_path_ = absl::StrCat("/tmp/coalesce-kserve-shm-", getpid(), "-",
                                ++sockets_, ".sock");
    config.unix_socket = socket_path_;
    config.shared_memory.allow = true;
    absl::StatusOr<std::unique_ptr<RunningServer>> server =
        BuildServer(config, backend_.get(), "test");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = GRPCInferenceService::NewStub(
        grpc::CreateChannel(absl::StrCat("unix:", socket_path_),
                            grpc::InsecureChannelCredentials()));
    shm_ = std::make_unique<Shm>(
        absl::StrCat("/coalesce-kserve-test-", getpid()), kObjectBytes);
    // "in" and "out": the object's two halves.
    ASSERT_TRUE(Register("alice", "in", 0, kRegionBytes).ok());
    ASSERT_TRUE(Register("alice", "out", kRegionBytes, kRegionBytes).ok());
  }

  static void As(const std::string& client, grpc::ClientContext* context) {
    context->AddMetadata("x-coalesce-client", client);
  }

  grpc::Status Register(const std::string& client, const std::string& name,
                        uint64_t offset, uint64_t byte_size) {
    grpc::ClientContext context;
    As(client, &context);
    inference::SystemSharedMemoryRegisterRequest request;
    request.set_name(name);
    request.set_key(shm_->key());
    request.set_offset(offset);
    request.set_byte_size(byte_size);
    inference::SystemSharedMemoryRegisterResponse response;
    return stub_->SystemSharedMemoryRegister(&context, request, &response);
  }

  grpc::Status Status(const std::string& client, const std::string& name,
                      inference::SystemSharedMemoryStatusResponse* response) {
    grpc::ClientContext context;
    As(client, &context);
    inference::SystemSharedMemoryStatusRequest request;
    request.set_name(name);
    return stub_->SystemSharedMemoryStatus(&context, request, response);
  }

  grpc::Status Unregister(const std::string& client, const std::string& name) {
    grpc::ClientContext context;
    As(client, &context);
    inference::SystemSharedMemoryUnregisterRequest request;
    request.set_name(name);
    inference::SystemSharedMemoryUnregisterResponse response;
    return stub_->SystemSharedMemoryUnregister(&context, request, &response);
  }

  grpc::Status Infer(const std::string& client,
                     const ModelInferRequest& request,
                     ModelInferResponse* response) {
    grpc::ClientContext context;
    As(client, &context);
    return stub_->ModelInfer(&context, request, response);
  }

  // Expects request (as alice) to fail with code and a message starting
  // with field.
  void ExpectError(const ModelInferRequest& request, grpc::StatusCode code,
                   const std::string& field) {
    ModelInferResponse response;
    const grpc::Status status = Infer("alice", request, &response);
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_THAT(status.error_message(), StartsWith(field));
  }

  static inline int sockets_ = 0;
  std::string socket_path_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RunningServer> server_;
  std::unique_ptr<GRPCInferenceService::Stub> stub_;
  std::unique_ptr<Shm> shm_;
  std::mt19937 rng_{20261204};
};

// Sets the Triton shared-memory parameters on a tensor's parameters.
void InRegion(
    google::protobuf::Map<std::string, inference::InferParameter>* params,
    const std::string& region, int64_t byte_size, int64_t offset = 0) {
  (*params)["shared_memory_region"].set_string_param(region);
  (*params)["shared_memory_byte_size"].set_int64_param(byte_size);
  if (offset != 0) (*params)["shared_memory_offset"].set_int64_param(offset);
}

// A request for model with INPUT0 [shape] FP32 in region "in" at offset.
ModelInferRequest ShmRequest(const std::string& model,
                             const std::vector<int64_t>& shape,
                             int64_t offset) {
  ModelInferRequest r;
  r.set_model_name(model);
  auto* in = r.add_inputs();
  in->set_name("INPUT0");
  in->set_datatype("FP32");
  for (int64_t d : shape) in->add_shape(d);
  InRegion(in->mutable_parameters(), "in", Elements(shape) * 4, offset);
  return r;
}

TEST_F(InferenceSharedMemoryTest, RegisterStatusUnregisterPerIdentity) {
  inference::SystemSharedMemoryStatusResponse status;
  ASSERT_TRUE(Status("alice", "", &status).ok());
  ASSERT_EQ(status.regions().size(), 2);
  const auto& out = status.regions().at("out");
  EXPECT_EQ(out.name(), "out");
  EXPECT_EQ(out.key(), shm_->key());
  EXPECT_EQ(out.offset(), kRegionBytes);
  EXPECT_EQ(out.byte_size(), kRegionBytes);
  status.Clear();
  ASSERT_TRUE(Status("alice", "in", &status).ok());
  EXPECT_EQ(status.regions().size(), 1);
  EXPECT_EQ(Register("alice", "in", 0, 64).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);

  // bob sees none of alice's regions, cannot drop or use them.
  status.Clear();
  ASSERT_TRUE(Status("bob", "", &status).ok());
  EXPECT_TRUE(status.regions().empty());
  grpc::Status s = Status("bob", "in", &status);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), StartsWith("name: "));
  EXPECT_EQ(Unregister("bob", "in").error_code(), grpc::StatusCode::NOT_FOUND);
  for (const char* model : {"identity", "transpose"}) {
    SCOPED_TRACE(model);
    ModelInferResponse response;
    s = Infer("bob", ShmRequest(model, {4, 4}, 0), &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(),
                StartsWith("inputs[0].parameters.shared_memory_region: "));
  }
  // bob's own region of the same name is his alone.
  ASSERT_TRUE(Register("bob", "in", 0, 64).ok());
  status.Clear();
  ASSERT_TRUE(Status("alice", "in", &status).ok());
  EXPECT_EQ(status.regions().at("in").byte_size(), kRegionBytes);

  ASSERT_TRUE(Unregister("alice", "in").ok());
  EXPECT_EQ(Unregister("alice", "in").error_code(),
            grpc::StatusCode::NOT_FOUND);
  // No name: every region of the caller's, and only those.
  ASSERT_TRUE(Unregister("alice", "").ok());
  status.Clear();
  ASSERT_TRUE(Status("alice", "", &status).ok());
  EXPECT_TRUE(status.regions().empty());
  status.Clear();
  ASSERT_TRUE(Status("bob", "", &status).ok());
  EXPECT_EQ(status.regions().size(), 1);
}

TEST_F(InferenceSharedMemoryTest, InferReadsAndWritesSharedMemory) {
  const std::vector<int64_t> shape = {16, 24};
  const int64_t bytes = Elements(shape) * 4;
  const std::string in = RandomFloats(Elements(shape), &rng_);
  constexpr int64_t kInOffset = 256, kOutOffset = 512;
  std::memcpy(shm_->data() + kInOffset, in.data(), bytes);

  // transpose: input and output in shared memory.
  ModelInferRequest request = ShmRequest("transpose", shape, kInOffset);
  auto* out = request.add_outputs();
  out->set_name("OUTPUT0");
  InRegion(out->mutable_parameters(), "out", bytes + 64, kOutOffset);
  ModelInferResponse response;
  grpc::Status status = Infer("alice", request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  char* out_bytes = shm_->data() + kRegionBytes + kOutOffset;
  EXPECT_EQ(std::string(out_bytes, bytes), TransposeReference(in, shape, 4));
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_THAT(response.outputs(0).shape(), testing::ElementsAre(24, 16));
  EXPECT_EQ(response.outputs(0)
                .parameters()
                .at("shared_memory_byte_size")
                .int64_param(),
            bytes);
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_TRUE(response.raw_output_contents(0).empty());

  // identity: from shared memory into the response.
  response.Clear();
  status = Infer("alice", ShmRequest("identity", shape, kInOffset), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), in);

  // identity: raw bytes into shared memory.
  const std::string raw = RandomFloats(Elements(shape), &rng_);
  ModelInferRequest to_shm = RawRequest("identity", "FP32", shape, raw);
  out = to_shm.add_outputs();
  out->set_name("OUTPUT0");
  InRegion(out->mutable_parameters(), "out", bytes, 8);
  response.Clear();
  status = Infer("alice", to_shm, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(std::string(shm_->data() + kRegionBytes + 8, bytes), raw);

  // gemm with a in a region and b inline: raw_input_contents has b's only.
  const int64_t m = 8, k = 12, n = 10;
  const std::string a = RandomFloats(m * k, &rng_);
  const std::string b = RandomFloats(k * n, &rng_);
  std::memcpy(shm_->data(), a.data(), a.size());
  ModelInferRequest gemm;
  gemm.set_model_name("gemm");
  auto* ta = gemm.add_inputs();
  ta->set_name("a");
  ta->set_datatype("FP32");
  ta->add_shape(m);
  ta->add_shape(k);
  InRegion(ta->mutable_parameters(), "in", m * k * 4);
  auto* tb = gemm.add_inputs();
  tb->set_name("b");
  tb->set_datatype("FP32");
  tb->add_shape(k);
  tb->add_shape(n);
  gemm.add_raw_input_contents(b);
  response.Clear();
  status = Infer("alice", gemm, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  const std::string& d = response.raw_output_contents(0);
  ASSERT_EQ(d.size(), static_cast<size_t>(m * n * 4));
  const auto at = [](const std::string& s, int64_t i) {
    float v;
    std::memcpy(&v, &s[i * 4], 4);
    return v;
  };
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t p = 0; p < k; ++p) {
        want += double{at(a, i * k + p)} * at(b, p * n + j);
      }
      EXPECT_NEAR(at(d, i * n + j), want, 1e-4 * k) << i << "," << j;
    }
  }
}

TEST_F(InferenceSharedMemoryTest, OutOfBoundsRangesNameTheirField) {
  const std::vector<int64_t> shape = {16, 16};  // 1024 bytes
  for (const char* model : {"identity", "transpose"}) {
    SCOPED_TRACE(model);
    // Past the region's end by 4 bytes.
    ExpectError(ShmRequest(model, shape, kRegionBytes - 1020),
                grpc::StatusCode::INVALID_ARGUMENT,
                "inputs[0].parameters.shared_memory_offset: ");
    // offset + byte_size wraps around.
    ModelInferRequest wraps = ShmRequest(model, shape, 0);
    (*wraps.mutable_inputs(0)->mutable_parameters())["shared_memory_offset"]
        .set_uint64_param(~uint64_t{0} - 100);
    ExpectError(wraps, grpc::StatusCode::INVALID_ARGUMENT,
                "inputs[0].parameters.shared_memory_offset: ");
    // A size that is not the tensor's.
    ModelInferRequest size = ShmRequest(model, shape, 0);
    InRegion(size.mutable_inputs(0)->mutable_parameters(), "in", 1000);
    ExpectError(size, grpc::StatusCode::INVALID_ARGUMENT,
                "inputs[0].parameters.shared_memory_byte_size: ");
    ModelInferRequest negative = ShmRequest(model, shape, 0);
    (*negative.mutable_inputs(0)->mutable_parameters())["shared_memory_offset"]
        .set_int64_param(-8);
    ExpectError(negative, grpc::StatusCode::INVALID_ARGUMENT,
                "inputs[0].parameters.shared_memory_offset: ");
    ModelInferRequest unknown = ShmRequest(model, shape, 0);
    InRegion(unknown.mutable_inputs(0)->mutable_parameters(), "nowhere", 1024);
    ExpectError(unknown, grpc::StatusCode::NOT_FOUND,
                "inputs[0].parameters.shared_memory_region: ");
    // An output range past the region's end.
    ModelInferRequest output = ShmRequest(model, shape, 0);
    auto* out = output.add_outputs();
    out->set_name("OUTPUT0");
    InRegion(out->mutable_parameters(), "out", 1024, kRegionBytes - 512);
    ExpectError(output, grpc::StatusCode::INVALID_ARGUMENT,
                "outputs[0].parameters.shared_memory_offset: ");
    ModelInferRequest small = ShmRequest(model, shape, 0);
    out = small.add_outputs();
    out->set_name("OUTPUT0");
    InRegion(out->mutable_parameters(), "out", 512);
    ExpectError(small, grpc::StatusCode::INVALID_ARGUMENT,
                "outputs[0].parameters.shared_memory_byte_size: ");
  }
  // A size without a region.
  ModelInferRequest orphan =
      RawRequest("transpose", "FP32", {2, 2}, RandomFloats(4, &rng_));
  (*orphan.mutable_inputs(0)->mutable_parameters())["shared_memory_byte_size"]
      .set_int64_param(16);
  ExpectError(orphan, grpc::StatusCode::INVALID_ARGUMENT,
              "inputs[0].parameters.shared_memory_byte_size: ");
}

TEST(InferenceServiceAuthTest, EveryRpcNeedsAToken) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  ServerConfig config;
  config.listen = "";
  const std::string token = "user-token-0123456789abcdef";
  config.auth_tokens.entries = {{token, "team-a", Role::kUser}};
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = GRPCInferenceService::NewStub((*server)->InProcessChannel());
  const auto unauthenticated = [](const grpc::Status& s) {
    return s.error_code() == grpc::StatusCode::UNAUTHENTICATED;
  };
  {
    grpc::ClientContext c;
    inference::ServerLiveResponse r;
    EXPECT_TRUE(unauthenticated(
        stub->ServerLive(&c, inference::ServerLiveRequest(), &r)));
  }
  {
    grpc::ClientContext c;
    inference::ServerReadyResponse r;
    EXPECT_TRUE(unauthenticated(
        stub->ServerReady(&c, inference::ServerReadyRequest(), &r)));
  }
  {
    grpc::ClientContext c;
    inference::ModelReadyRequest q;
    q.set_name("identity");
    inference::ModelReadyResponse r;
    EXPECT_TRUE(unauthenticated(stub->ModelReady(&c, q, &r)));
  }
  {
    grpc::ClientContext c;
    inference::ServerMetadataResponse r;
    EXPECT_TRUE(unauthenticated(
        stub->ServerMetadata(&c, inference::ServerMetadataRequest(), &r)));
  }
  {
    grpc::ClientContext c;
    inference::ModelMetadataRequest q;
    q.set_name("identity");
    inference::ModelMetadataResponse r;
    EXPECT_TRUE(unauthenticated(stub->ModelMetadata(&c, q, &r)));
  }
  for (const char* model : {"identity", "transpose"}) {
    SCOPED_TRACE(model);
    const ModelInferRequest request =
        RawRequest(model, "FP32", {2, 2}, std::string(16, '\0'));
    {
      grpc::ClientContext c;
      ModelInferResponse r;
      EXPECT_TRUE(unauthenticated(stub->ModelInfer(&c, request, &r)));
    }
    grpc::ClientContext c;
    c.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    ModelInferResponse r;
    const grpc::Status status = stub->ModelInfer(&c, request, &r);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
}

}  // namespace
}  // namespace coalesce
