// The service end to end through gRPC: an in-process channel to a server
// built by BuildServer on the CPU backend, and one TCP round trip on port 0.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "kernels/backends.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/server.h"

namespace coalesce {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// ---- Tensors and references.

std::vector<int64_t> Strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * shape[i + 1];
  }
  return strides;
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// out.shape[i] = in_shape[perm[i]], computed one element at a time.
std::string PermuteReference(const std::string& in,
                             const std::vector<int64_t>& in_shape,
                             const std::vector<int>& perm, size_t elem_size) {
  const int rank = static_cast<int>(in_shape.size());
  std::vector<int64_t> out_shape(rank);
  for (int i = 0; i < rank; ++i) out_shape[i] = in_shape[perm[i]];
  const std::vector<int64_t> in_strides = Strides(in_shape);
  std::string out(in.size(), '\0');
  std::vector<int64_t> index(rank, 0);  // multi-index into the output
  for (int64_t o = 0; o < Elements(out_shape); ++o) {
    int64_t i = 0;
    for (int d = 0; d < rank; ++d) i += index[d] * in_strides[perm[d]];
    std::memcpy(&out[o * elem_size], &in[i * elem_size], elem_size);
    for (int d = rank - 1; d >= 0 && ++index[d] == out_shape[d]; --d) {
      index[d] = 0;
    }
  }
  return out;
}

v1::Tensor RandomTensor(const std::vector<int64_t>& shape, v1::DataType dtype,
                        std::mt19937* rng) {
  v1::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  // Any bit pattern will do for data movement, which must copy it exactly.
  std::string* raw = t.mutable_raw();
  raw->resize(Elements(shape) * (dtype == v1::DATA_TYPE_FLOAT32 ? 4 : 2));
  for (char& c : *raw) c = static_cast<char>((*rng)() & 0xff);
  return t;
}

v1::Tensor FloatTensor(const std::vector<int64_t>& shape, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(Elements(shape));
  for (float& v : values) v = dist(*rng);
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_FLOAT32);
  for (int64_t d : shape) t.add_shape(d);
  t.set_raw(std::string(reinterpret_cast<const char*>(values.data()),
                        values.size() * sizeof(float)));
  return t;
}

std::vector<double> Doubles(const v1::Tensor& t) {
  std::vector<float> f(t.raw().size() / sizeof(float));
  std::memcpy(f.data(), t.raw().data(), t.raw().size());
  return std::vector<double>(f.begin(), f.end());
}

std::vector<int64_t> ShapeOf(const v1::Tensor& t) {
  return std::vector<int64_t>(t.shape().begin(), t.shape().end());
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want,
                double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance) << "element " << i;
  }
}

// ---- The fixture: a CPU backend behind an in-process channel.

class ServiceTest : public testing::Test {
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
    args.SetMaxReceiveMessageSize(-1);  // responses above 4 MiB
    channel_ = server_->InProcessChannel(args);
    stub_ = v1::TensorOps::NewStub(channel_);
  }

  v1::GetServerInfoResponse ServerInfo() {
    grpc::ClientContext context;
    v1::GetServerInfoResponse info;
    const grpc::Status status =
        stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return info;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RunningServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TensorOps::Stub> stub_;
  std::mt19937 rng_{20261130};
};

TEST_F(ServiceTest, TransposeIsExactForEveryDType) {
  for (v1::DataType dtype :
       {v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16}) {
    SCOPED_TRACE(v1::DataType_Name(dtype));
    v1::TransposeRequest request;
    *request.mutable_input() = RandomTensor({3, 17, 33}, dtype, &rng_);
    grpc::ClientContext context;
    v1::TransposeResponse response;
    const grpc::Status status = stub_->Transpose(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.output().dtype(), dtype);
    EXPECT_EQ(ShapeOf(response.output()), (std::vector<int64_t>{3, 33, 17}));
    const size_t es = dtype == v1::DATA_TYPE_FLOAT32 ? 4 : 2;
    EXPECT_EQ(
        response.output().raw(),
        PermuteReference(request.input().raw(), {3, 17, 33}, {0, 2, 1}, es));
    EXPECT_FALSE(response.has_report());
  }
}

TEST_F(ServiceTest, ReportIsFilledWhenAsked) {
  v1::TransposeRequest request;
  *request.mutable_input() =
      RandomTensor({64, 48}, v1::DATA_TYPE_FLOAT32, &rng_);
  request.mutable_options()->set_report(true);
  grpc::ClientContext context;
  v1::TransposeResponse response;
  const grpc::Status status = stub_->Transpose(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(response.has_report());
  const v1::KernelReport& report = response.report();
  EXPECT_THAT(report.variant(), HasSubstr("transpose.cpu."));
  EXPECT_EQ(report.backend(), "cpu");
  EXPECT_EQ(report.device(), backend_->device().name);
  EXPECT_GT(report.kernel_seconds(), 0);
  EXPECT_EQ(report.bytes_moved(), 2 * 64 * 48 * 4);  // read once, write once
  EXPECT_NEAR(report.achieved_bytes_per_second(),
              report.bytes_moved() / report.kernel_seconds(),
              1e-6 * report.achieved_bytes_per_second());
  EXPECT_EQ(report.flops(), 0);
  EXPECT_EQ(report.bound(), "memory");
  EXPECT_EQ(report.selection_source(), "heuristic");
  EXPECT_FALSE(report.selection_reason().empty());
  EXPECT_FALSE(report.has_launch());  // CPU variants launch nothing
}

TEST_F(ServiceTest, GemmMatchesDoubleLoop) {
  struct Case {
    std::vector<int64_t> a, b, c;
    bool trans_a, trans_b;
  };
  // m=5, n=7, k=9 in every case; batch 3 where any operand is rank 3.
  const Case cases[] = {
      {{5, 9}, {9, 7}, {}, false, false},
      {{3, 9, 5}, {7, 9}, {5, 7}, true, true},
      {{5, 9}, {3, 9, 7}, {3, 5, 7}, false, false},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(absl::StrCat("a rank ", tc.a.size(), " b rank ", tc.b.size(),
                              " c rank ", tc.c.size()));
    v1::GemmRequest request;
    *request.mutable_a() = FloatTensor(tc.a, &rng_);
    *request.mutable_b() = FloatTensor(tc.b, &rng_);
    const bool has_c = !tc.c.empty();
    if (has_c) *request.mutable_c() = FloatTensor(tc.c, &rng_);
    request.set_trans_a(tc.trans_a);
    request.set_trans_b(tc.trans_b);
    request.set_alpha(0.75f);
    if (has_c) request.set_beta(-1.5f);
    request.mutable_options()->set_report(true);
    grpc::ClientContext context;
    v1::GemmResponse response;
    const grpc::Status status = stub_->Gemm(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();

    const int64_t m = 5, n = 7, k = 9;
    const bool batched =
        tc.a.size() == 3 || tc.b.size() == 3 || tc.c.size() == 3;
    const int64_t batch = batched ? 3 : 1;
    const std::vector<int64_t> d_shape =
        batched ? std::vector<int64_t>{3, m, n} : std::vector<int64_t>{m, n};
    EXPECT_EQ(ShapeOf(response.d()), d_shape);
    const std::vector<double> a = Doubles(request.a());
    const std::vector<double> b = Doubles(request.b());
    const std::vector<double> c =
        has_c ? Doubles(request.c()) : std::vector<double>();
    const int64_t sa = tc.a.size() == 3 ? m * k : 0;
    const int64_t sb = tc.b.size() == 3 ? k * n : 0;
    const int64_t sc = tc.c.size() == 3 ? m * n : 0;
    std::vector<double> want(batch * m * n);
    for (int64_t p = 0; p < batch; ++p) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t l = 0; l < k; ++l) {
            const double av = a[p * sa + (tc.trans_a ? l * m + i : i * k + l)];
            const double bv = b[p * sb + (tc.trans_b ? j * k + l : l * n + j)];
            sum += av * bv;
          }
          double d = 0.75 * sum;
          if (has_c) d += -1.5 * c[p * sc + i * n + j];
          want[(p * m + i) * n + j] = d;
        }
      }
    }
    ExpectNear(Doubles(response.d()), want, 1e-5);
    EXPECT_EQ(response.report().bytes_moved(),
              (a.size() + b.size() + c.size() + want.size()) * 4);
    EXPECT_GT(response.report().flops(), 2.0 * batch * m * n * k - 1);
  }
}

TEST_F(ServiceTest, ConvertLayoutIsExact) {
  struct Case {
    std::vector<int64_t> shape;
    std::vector<int> perm;
    void (*set)(v1::ConvertLayoutRequest*);
  };
  const Case cases[] = {
      {{2, 3, 5, 7},
       {0, 2, 3, 1},
       [](v1::ConvertLayoutRequest* r) {
         r->mutable_layouts()->set_from(v1::LAYOUT_NCHW);
         r->mutable_layouts()->set_to(v1::LAYOUT_NHWC);
       }},
      {{2, 5, 7, 3},
       {0, 3, 1, 2},
       [](v1::ConvertLayoutRequest* r) {
         r->mutable_layouts()->set_from(v1::LAYOUT_NHWC);
         r->mutable_layouts()->set_to(v1::LAYOUT_NCHW);
       }},
      {{2, 3, 4, 5},
       {3, 1, 0, 2},
       [](v1::ConvertLayoutRequest* r) {
         for (int p : {3, 1, 0, 2}) r->mutable_permutation()->add_perm(p);
       }},
      {{11, 3},
       {1, 0},
       [](v1::ConvertLayoutRequest* r) {
         r->mutable_aos_soa()->set_direction(v1::AosSoa::DIRECTION_AOS_TO_SOA);
       }},
      {{3, 11},
       {1, 0},
       [](v1::ConvertLayoutRequest* r) {
         r->mutable_aos_soa()->set_direction(v1::AosSoa::DIRECTION_SOA_TO_AOS);
         r->mutable_aos_soa()->set_fields(3);
       }},
  };
  for (const Case& tc : cases) {
    v1::ConvertLayoutRequest request;
    tc.set(&request);
    SCOPED_TRACE(request.ShortDebugString());
    *request.mutable_input() =
        RandomTensor(tc.shape, v1::DATA_TYPE_FLOAT16, &rng_);
    grpc::ClientContext context;
    v1::ConvertLayoutResponse response;
    const grpc::Status status =
        stub_->ConvertLayout(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    std::vector<int64_t> out_shape;
    for (int p : tc.perm) out_shape.push_back(tc.shape[p]);
    EXPECT_EQ(ShapeOf(response.output()), out_shape);
    EXPECT_EQ(response.output().raw(),
              PermuteReference(request.input().raw(), tc.shape, tc.perm, 2));
  }
}

double Gelu(double v, bool tanh_approx) {
  if (tanh_approx) {
    const double kSqrt2OverPi = 0.7978845608028654;
    return 0.5 * v * (1 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v)));
  }
  return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
}

// GELU-LN over the last dimension of x (every parameter present), in
// double: y, and h (the pre-norm values) when h is not null.
std::vector<double> GeluLnReference(
    const std::vector<double>& x, const std::vector<double>& bias,
    const std::vector<double>& residual, const std::vector<double>& gamma,
    const std::vector<double>& beta, int64_t hidden, double eps,
    bool tanh_approx, std::vector<double>* h_out = nullptr) {
  const int64_t rows = static_cast<int64_t>(x.size()) / hidden;
  std::vector<double> h(x.size()), y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      const int64_t i = r * hidden + j;
      h[i] = Gelu(x[i] + bias[j], tanh_approx) + residual[i];
      mean += h[i] / hidden;
    }
    double var = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      const double dev = h[r * hidden + j] - mean;
      var += dev * dev / hidden;
    }
    for (int64_t j = 0; j < hidden; ++j) {
      const int64_t i = r * hidden + j;
      y[i] = (h[i] - mean) / std::sqrt(var + eps) * gamma[j] + beta[j];
    }
  }
  if (h_out != nullptr) *h_out = std::move(h);
  return y;
}

TEST_F(ServiceTest, GeluLayerNormMatchesDoubleReference) {
  const int64_t hidden = 40;  // x is [2, 3, hidden]
  for (bool tanh_approx : {false, true}) {
    SCOPED_TRACE(tanh_approx ? "tanh" : "exact");
    v1::GeluLayerNormRequest request;
    *request.mutable_x() = FloatTensor({2, 3, hidden}, &rng_);
    *request.mutable_bias() = FloatTensor({hidden}, &rng_);
    *request.mutable_residual() = FloatTensor({2, 3, hidden}, &rng_);
    *request.mutable_gamma() = FloatTensor({hidden}, &rng_);
    *request.mutable_beta() = FloatTensor({hidden}, &rng_);
    request.set_epsilon(1e-3f);
    request.set_approximation(tanh_approx ? v1::GELU_APPROXIMATION_TANH
                                          : v1::GELU_APPROXIMATION_NONE);
    request.set_return_pre_norm(true);
    grpc::ClientContext context;
    v1::GeluLayerNormResponse response;
    const grpc::Status status =
        stub_->GeluLayerNorm(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();

    std::vector<double> h;
    const std::vector<double> y =
        GeluLnReference(Doubles(request.x()), Doubles(request.bias()),
                        Doubles(request.residual()), Doubles(request.gamma()),
                        Doubles(request.beta()), hidden, 1e-3, tanh_approx, &h);
    EXPECT_EQ(ShapeOf(response.y()), (std::vector<int64_t>{2, 3, hidden}));
    EXPECT_EQ(ShapeOf(response.h()), (std::vector<int64_t>{2, 3, hidden}));
    ExpectNear(Doubles(response.y()), y, 1e-4);
    ExpectNear(Doubles(response.h()), h, 1e-5);
  }
}

TEST_F(ServiceTest, PreNormOnlyWhenAsked) {
  v1::GeluLayerNormRequest request;
  *request.mutable_x() = FloatTensor({4, 8}, &rng_);
  grpc::ClientContext context;
  v1::GeluLayerNormResponse response;
  ASSERT_TRUE(stub_->GeluLayerNorm(&context, request, &response).ok());
  EXPECT_EQ(response.y().raw().size(), 4u * 8 * 4);
  EXPECT_FALSE(response.has_h());
}

TEST_F(ServiceTest, ForcedVariantIsUsed) {
  const v1::GetServerInfoResponse info = ServerInfo();
  int forced = 0;
  for (const v1::VariantInfo& v : info.variants()) {
    if (v.op() != "transpose") continue;
    SCOPED_TRACE(v.name());
    v1::TransposeRequest request;
    *request.mutable_input() =
        RandomTensor({9, 4}, v1::DATA_TYPE_FLOAT32, &rng_);
    request.mutable_options()->set_variant(v.name());
    request.mutable_options()->set_report(true);
    grpc::ClientContext context;
    v1::TransposeResponse response;
    const grpc::Status status = stub_->Transpose(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.report().variant(), v.name());
    EXPECT_EQ(response.report().selection_source(), "forced");
    EXPECT_EQ(response.output().raw(),
              PermuteReference(request.input().raw(), {9, 4}, {1, 0}, 4));
    ++forced;
  }
  EXPECT_GT(forced, 0);
}

// Shared memory is off unless the server allows it: an object on this host
// is never mapped for a client by default.
TEST_F(ServiceTest, SharedMemoryIsOffByDefault) {
  v1::RegisterSharedMemoryRequest request;
  request.set_name("r");
  request.set_key("/coalesce-anything");
  request.set_byte_size(8);
  grpc::ClientContext context;
  v1::RegisterSharedMemoryResponse response;
  const grpc::Status status =
      stub_->RegisterSharedMemory(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("--allow_client_shm"));
}

// A client string comes back cut to a short prefix: a 64 KiB variant name
// is INVALID_ARGUMENT naming the field, not a 64 KiB status message.
TEST_F(ServiceTest, AHugeVariantNameIsQuotedBounded) {
  v1::TransposeRequest request;
  *request.mutable_input() = RandomTensor({9, 4}, v1::DATA_TYPE_FLOAT32, &rng_);
  request.mutable_options()->set_variant(std::string(65536, 'v'));
  grpc::ClientContext context;
  v1::TransposeResponse response;
  const grpc::Status status = stub_->Transpose(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("options.variant"));
  EXPECT_THAT(status.error_message(), HasSubstr("(65536 bytes)"));
  EXPECT_LT(status.error_message().size(), 1024u);
}

TEST_F(ServiceTest, UnknownForcedVariantListsTheEligibleOnes) {
  v1::TransposeRequest request;
  *request.mutable_input() = RandomTensor({9, 4}, v1::DATA_TYPE_FLOAT32, &rng_);
  request.mutable_options()->set_variant("transpose.cpu.no_such_variant");
  grpc::ClientContext context;
  v1::TransposeResponse response;
  const grpc::Status status = stub_->Transpose(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("options.variant"));
  EXPECT_THAT(status.error_message(),
              HasSubstr("transpose.cpu.no_such_variant"));
  const v1::GetServerInfoResponse info = ServerInfo();
  for (const v1::VariantInfo& v : info.variants()) {
    if (v.op() == "transpose") {
      EXPECT_THAT(status.error_message(), HasSubstr(v.name()));
    }
  }
}

TEST_F(ServiceTest, CodecErrorsKeepTheirCode) {
  v1::GemmRequest gemm;
  *gemm.mutable_a() = FloatTensor({4, 5}, &rng_);
  *gemm.mutable_b() = FloatTensor({6, 7}, &rng_);
  grpc::ClientContext gemm_context;
  v1::GemmResponse gemm_response;
  grpc::Status status = stub_->Gemm(&gemm_context, gemm, &gemm_response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("b.shape[0]: k mismatch"));

  v1::TransposeRequest big;  // 32 MiB, over this server's 16 MiB limit
  *big.mutable_input() =
      RandomTensor({2048, 4096}, v1::DATA_TYPE_FLOAT32, &rng_);
  grpc::ClientContext big_context;
  v1::TransposeResponse big_response;
  status = stub_->Transpose(&big_context, big, &big_response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("input:"));
}

TEST_F(ServiceTest, MessagesAboveGrpcDefaultLimitAreServed) {
  // 12 MiB each way: past gRPC's default 4 MiB receive limit.
  v1::TransposeRequest request;
  *request.mutable_input() =
      RandomTensor({1536, 2048}, v1::DATA_TYPE_FLOAT32, &rng_);
  grpc::ClientContext context;
  v1::TransposeResponse response;
  const grpc::Status status = stub_->Transpose(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.output().raw(),
            PermuteReference(request.input().raw(), {1536, 2048}, {1, 0}, 4));
}

TEST_F(ServiceTest, ServerInfoDescribesBackendAndVariants) {
  const v1::GetServerInfoResponse info = ServerInfo();
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_EQ(info.backend_reason(), "test: CreateCpuBackend(2)");
  ASSERT_EQ(info.devices_size(), 1);
  EXPECT_EQ(info.devices(0).backend(), "cpu");
  EXPECT_EQ(info.devices(0).name(), backend_->device().name);
  EXPECT_EQ(info.devices(0).multiprocessors(), 2);
  EXPECT_FALSE(info.build().version().empty());
  EXPECT_FALSE(info.build().git_sha().empty());
  EXPECT_EQ(info.build().cuda_enabled(), CudaBackendBuilt());
  EXPECT_EQ(info.limits().max_tensor_bytes(), 16 << 20);
  EXPECT_EQ(info.limits().max_rank(), kMaxRank);
  std::set<std::string> ops;
  for (const v1::VariantInfo& v : info.variants()) {
    EXPECT_EQ(v.backend(), "cpu") << v.name();
    EXPECT_THAT(v.name(), testing::StartsWith(v.op() + ".cpu.")) << v.name();
    EXPECT_FALSE(v.description().empty()) << v.name();
    ops.insert(v.op());
  }
  EXPECT_EQ(ops, (std::set<std::string>{"transpose", "gemm", "convert_layout",
                                        "gelu_layer_norm"}));
}

grpc::health::v1::HealthCheckResponse::ServingStatus CheckHealth(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
    grpc::StatusCode expected_code = grpc::StatusCode::OK) {
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  const grpc::Status status = health->Check(&context, request, &response);
  EXPECT_EQ(status.error_code(), expected_code) << status.error_message();
  return response.status();
}

TEST_F(ServiceTest, HealthIsServing) {
  EXPECT_EQ(CheckHealth(channel_, ""),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(channel_, "coalesce.v1.TensorOps"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(channel_, "inference.GRPCInferenceService"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  CheckHealth(channel_, "no.such.Service", grpc::StatusCode::NOT_FOUND);
}

// Lists the services that server reflection reports. Debian's gRPC ships no
// C++ stubs for reflection, but libgrpc++_reflection registers its
// descriptors, so the messages are built dynamically and sent through the
// generic stub.
std::vector<std::string> ReflectedServices(
    const std::shared_ptr<grpc::Channel>& channel) {
  namespace pb = google::protobuf;
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  const pb::Descriptor* request_type = pool->FindMessageTypeByName(
      "grpc.reflection.v1alpha.ServerReflectionRequest");
  const pb::Descriptor* response_type = pool->FindMessageTypeByName(
      "grpc.reflection.v1alpha.ServerReflectionResponse");
  if (request_type == nullptr || response_type == nullptr) {
    ADD_FAILURE() << "reflection descriptors are not linked in";
    return {};
  }
  pb::DynamicMessageFactory factory;
  std::unique_ptr<pb::Message> request(
      factory.GetPrototype(request_type)->New());
  request->GetReflection()->SetString(
      request.get(), request_type->FindFieldByName("list_services"), "*");
  const std::string request_bytes = request->SerializeAsString();
  grpc::Slice request_slice(request_bytes);
  grpc::ByteBuffer request_buffer(&request_slice, 1);

  grpc::CompletionQueue cq;
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  // Each step completes before the next starts: a tag per step is enough.
  auto step = [&cq](int tag) {
    void* got = nullptr;
    bool ok = false;
    return cq.Next(&got, &ok) && got == reinterpret_cast<void*>(tag) && ok;
  };
  auto call = stub.PrepareCall(
      &context,
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  EXPECT_TRUE(step(1));
  call->Write(request_buffer, reinterpret_cast<void*>(2));
  EXPECT_TRUE(step(2));
  grpc::ByteBuffer response_buffer;
  call->Read(&response_buffer, reinterpret_cast<void*>(3));
  EXPECT_TRUE(step(3));
  call->WritesDone(reinterpret_cast<void*>(4));
  EXPECT_TRUE(step(4));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  EXPECT_TRUE(step(5));
  EXPECT_TRUE(status.ok()) << status.error_message();

  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(response_buffer.Dump(&slices).ok());
  std::string response_bytes;
  for (const grpc::Slice& s : slices) {
    response_bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  std::unique_ptr<pb::Message> response(
      factory.GetPrototype(response_type)->New());
  EXPECT_TRUE(response->ParseFromString(response_bytes));
  const pb::Message& list = response->GetReflection()->GetMessage(
      *response, response_type->FindFieldByName("list_services_response"));
  const pb::FieldDescriptor* service_field =
      list.GetDescriptor()->FindFieldByName("service");
  std::vector<std::string> names;
  for (int i = 0; i < list.GetReflection()->FieldSize(list, service_field);
       ++i) {
    const pb::Message& service =
        list.GetReflection()->GetRepeatedMessage(list, service_field, i);
    names.push_back(service.GetReflection()->GetString(
        service, service.GetDescriptor()->FindFieldByName("name")));
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  return names;
}

TEST_F(ServiceTest, ReflectionListsTheService) {
  const std::vector<std::string> services = ReflectedServices(channel_);
  EXPECT_THAT(services, Contains("coalesce.v1.TensorOps"));
  EXPECT_THAT(services, Contains("grpc.health.v1.Health"));
}

// A CPU backend whose every Execute fails with a fault that also makes it
// unhealthy, as a sticky CUDA error does.
class FaultyBackend final : public Backend {
 public:
  FaultyBackend() : cpu_(CreateCpuBackend(1)) {}
  BackendKind kind() const override { return cpu_->kind(); }
  const DeviceInfo& device() const override { return cpu_->device(); }
  const VariantRegistry& registry() const override { return cpu_->registry(); }
  absl::Status Execute(const KernelVariant&, const Problem&, const Operands&,
                       RunResult*) override {
    faulted_ = true;
    return absl::InternalError("injected device fault");
  }
  absl::Status Health() const override {
    return faulted_ ? absl::InternalError("sticky fault") : absl::OkStatus();
  }

 private:
  std::unique_ptr<Backend> cpu_;
  std::atomic<bool> faulted_{false};
};

TEST_F(ServiceTest, ExplainSelectionListsCandidatesWithoutData) {
  v1::ExplainSelectionRequest request;
  v1::Tensor* input = request.mutable_transpose()->mutable_input();
  input->set_dtype(v1::DATA_TYPE_FLOAT32);
  input->add_shape(2048);
  input->add_shape(1024);  // 8 MiB described, nothing sent or allocated
  grpc::ClientContext context;
  v1::ExplainSelectionResponse response;
  const grpc::Status status =
      stub_->ExplainSelection(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.source(), "heuristic");
  EXPECT_EQ(response.chosen_variant(), "transpose.cpu.blocked");
  EXPECT_TRUE(absl::StrContains(response.key(), "transpose|float32"));
  ASSERT_EQ(response.candidates_size(), 2);
  for (const v1::VariantCandidate& c : response.candidates()) {
    EXPECT_TRUE(c.eligible()) << c.variant();
    EXPECT_GT(c.estimated_seconds(), 0);
    EXPECT_EQ(c.measured_seconds(), -1);
  }
}

TEST_F(ServiceTest, ExplainSelectionStillValidatesShapes) {
  v1::ExplainSelectionRequest request;
  v1::Tensor* input = request.mutable_transpose()->mutable_input();
  input->set_dtype(v1::DATA_TYPE_FLOAT32);
  input->add_shape(0);
  input->add_shape(8);
  grpc::ClientContext context;
  v1::ExplainSelectionResponse response;
  const grpc::Status status =
      stub_->ExplainSelection(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "input.shape[0]"));
  grpc::ClientContext context2;
  const grpc::Status empty = stub_->ExplainSelection(
      &context2, v1::ExplainSelectionRequest(), &response);
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// --autotune=eager: the first request of a shape is tuned inline and served
// by the winner; the report says where the choice came from.
TEST(ServiceSelectionTest, EagerAutotuneServesFromTheCache) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  ServerConfig config;
  config.listen = "";
  config.selection.autotune = AutotuneMode::kEager;
  config.selection.build_id = "test";
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::TensorOps::NewStub((*server)->InProcessChannel());
  std::mt19937 rng(5);
  for (int i = 0; i < 2; ++i) {
    v1::TransposeRequest request;
    *request.mutable_input() =
        RandomTensor({96, 80}, v1::DATA_TYPE_FLOAT32, &rng);
    request.mutable_options()->set_report(true);
    grpc::ClientContext context;
    v1::TransposeResponse response;
    ASSERT_TRUE(stub->Transpose(&context, request, &response).ok());
    EXPECT_EQ(response.report().selection_source(), "cache");
    EXPECT_EQ(response.output().raw(),
              PermuteReference(request.input().raw(), {96, 80}, {1, 0}, 4));
  }
  EXPECT_EQ((*server)->selector->tunings(), 1);
}

// Many callers at once through the device queue: every response carries
// its own request's result (random shapes and bytes, checked against the
// reference), none is lost or answered twice.
TEST_F(ServiceTest, ConcurrentCallersEachGetTheirOwnResult) {
  constexpr int kThreads = 8, kRequests = 24;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1000 + t);
      std::uniform_int_distribution<int64_t> side(1, 70);
      for (int i = 0; i < kRequests; ++i) {
        const std::vector<int64_t> shape = {side(rng), side(rng)};
        v1::TransposeRequest request;
        *request.mutable_input() =
            RandomTensor(shape, v1::DATA_TYPE_FLOAT32, &rng);
        grpc::ClientContext context;
        v1::TransposeResponse response;
        const grpc::Status status =
            stub_->Transpose(&context, request, &response);
        if (!status.ok()) {
          ++failed;
          continue;
        }
        if (response.output().raw() !=
                PermuteReference(request.input().raw(), shape, {1, 0}, 4) ||
            ShapeOf(response.output()) !=
                std::vector<int64_t>{shape[1], shape[0]}) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

// Many callers at once with batching on for every op, one request running
// at a time so that the others queue and batch: every caller gets its own
// result (random data, shapes that stack with each other's, checked against
// references), and batches did form.
TEST(ServiceBatchTest, BatchedCallersEachGetTheirOwnResult) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(2);
  ServerConfig config;
  config.listen = "";
  config.max_in_flight = 1;
  config.batch_ops =
      std::vector<OpKind>(std::begin(kAllOps), std::end(kAllOps));
  config.batch_max_delay_us = 2000;
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::TensorOps::NewStub((*server)->InProcessChannel({}));

  // Parameters every caller shares, so that their requests stack.
  constexpr int64_t kHidden = 24, kK = 8, kN = 6;
  std::mt19937 shared_rng(77);
  const v1::Tensor bias = FloatTensor({kHidden}, &shared_rng);
  const v1::Tensor gamma = FloatTensor({kHidden}, &shared_rng);
  const v1::Tensor beta = FloatTensor({kHidden}, &shared_rng);
  const v1::Tensor weight = FloatTensor({kK, kN}, &shared_rng);

  constexpr int kThreads = 12, kRequests = 30;
  std::atomic<int> wrong{0}, failed{0}, batched{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(3000 + t);
      std::uniform_int_distribution<int64_t> lead(1, 4);
      for (int i = 0; i < kRequests; ++i) {
        grpc::ClientContext context;
        grpc::Status status;
        bool right = false;
        int32_t batch_size = 0;
        switch (rng() % 4) {
          case 0: {
            const std::vector<int64_t> shape = {lead(rng), 3, 5};
            v1::TransposeRequest request;
            *request.mutable_input() =
                RandomTensor(shape, v1::DATA_TYPE_FLOAT32, &rng);
            request.mutable_options()->set_report(true);
            v1::TransposeResponse response;
            status = stub->Transpose(&context, request, &response);
            right = response.output().raw() ==
                        PermuteReference(request.input().raw(), shape,
                                         {0, 2, 1}, 4) &&
                    ShapeOf(response.output()) ==
                        std::vector<int64_t>{shape[0], 5, 3};
            batch_size = response.report().batch_size();
            break;
          }
          case 1: {
            const std::vector<int64_t> shape = {lead(rng), 3, 2, 4};
            v1::ConvertLayoutRequest request;
            request.mutable_layouts()->set_from(v1::LAYOUT_NCHW);
            request.mutable_layouts()->set_to(v1::LAYOUT_NHWC);
            *request.mutable_input() =
                RandomTensor(shape, v1::DATA_TYPE_FLOAT16, &rng);
            request.mutable_options()->set_report(true);
            v1::ConvertLayoutResponse response;
            status = stub->ConvertLayout(&context, request, &response);
            right =
                response.output().raw() ==
                PermuteReference(request.input().raw(), shape, {0, 2, 3, 1}, 2);
            batch_size = response.report().batch_size();
            break;
          }
          case 2: {
            const int64_t rows = lead(rng);
            v1::GeluLayerNormRequest request;
            *request.mutable_x() = FloatTensor({rows, kHidden}, &rng);
            *request.mutable_residual() = FloatTensor({rows, kHidden}, &rng);
            *request.mutable_bias() = bias;
            *request.mutable_gamma() = gamma;
            *request.mutable_beta() = beta;
            request.mutable_options()->set_report(true);
            v1::GeluLayerNormResponse response;
            status = stub->GeluLayerNorm(&context, request, &response);
            const std::vector<double> want =
                GeluLnReference(Doubles(request.x()), Doubles(bias),
                                Doubles(request.residual()), Doubles(gamma),
                                Doubles(beta), kHidden, 1e-5, false);
            const std::vector<double> got = Doubles(response.y());
            right = got.size() == want.size();
            for (size_t j = 0; right && j < got.size(); ++j) {
              right = std::abs(got[j] - want[j]) < 1e-4;
            }
            batch_size = response.report().batch_size();
            break;
          }
          default: {
            const int64_t m = lead(rng);
            v1::GemmRequest request;
            *request.mutable_a() = FloatTensor({m, kK}, &rng);
            *request.mutable_b() = weight;
            request.mutable_options()->set_report(true);
            v1::GemmResponse response;
            status = stub->Gemm(&context, request, &response);
            const std::vector<double> a = Doubles(request.a());
            const std::vector<double> b = Doubles(weight);
            const std::vector<double> got = Doubles(response.d());
            right = got.size() == static_cast<size_t>(m * kN) &&
                    ShapeOf(response.d()) == std::vector<int64_t>{m, kN};
            for (int64_t r = 0; right && r < m; ++r) {
              for (int64_t c = 0; c < kN; ++c) {
                double sum = 0;
                for (int64_t l = 0; l < kK; ++l) {
                  sum += a[r * kK + l] * b[l * kN + c];
                }
                right = right && std::abs(got[r * kN + c] - sum) < 1e-4;
              }
            }
            batch_size = response.report().batch_size();
          }
        }
        if (!status.ok()) {
          ++failed;
          ADD_FAILURE() << status.error_message();
          continue;
        }
        if (!right) ++wrong;
        EXPECT_GE(batch_size, 1);
        if (batch_size > 1) ++batched;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  // With one request running at a time and a 2 ms window, most requests
  // find company.
  EXPECT_GT(batched.load(), kThreads * kRequests / 4);
}

// A full device queue answers at once with RESOURCE_EXHAUSTED naming the
// flag; what was admitted still completes.
TEST(ServiceQueueTest, AFullQueueRefusesAtOnce) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(2);
  ServerConfig config;
  config.listen = "";
  config.max_in_flight = 1;
  config.max_queue_requests = 1;
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // 4 MiB responses
  auto stub = v1::TensorOps::NewStub((*server)->InProcessChannel(args));
  // GEMMs long enough (a large fraction of a second on two cores) that the
  // later ones arrive while the first runs.
  std::mt19937 rng(9);
  v1::GemmRequest gemm;
  *gemm.mutable_a() = FloatTensor({1024, 1024}, &rng);
  *gemm.mutable_b() = FloatTensor({1024, 1024}, &rng);
  constexpr int kCalls = 6;
  std::vector<std::future<std::pair<grpc::Status, double>>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      grpc::ClientContext context;
      v1::GemmResponse response;
      const auto start = std::chrono::steady_clock::now();
      grpc::Status status = stub->Gemm(&context, gemm, &response);
      return std::make_pair(status,
                            std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - start)
                                .count());
    }));
  }
  int ok = 0, refused = 0;
  double slowest_ok = 0, slowest_refusal = 0;
  for (auto& call : calls) {
    const auto [status, seconds] = call.get();
    if (status.ok()) {
      ++ok;
      slowest_ok = std::max(slowest_ok, seconds);
    } else {
      ++refused;
      EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << status.error_message();
      EXPECT_THAT(status.error_message(), HasSubstr("--max_queue_requests"));
      slowest_refusal = std::max(slowest_refusal, seconds);
    }
  }
  // One runs and one waits; at least one of the others finds the queue
  // full, and is told before the admitted ones are done.
  EXPECT_GE(ok, 1);
  EXPECT_GE(refused, 1);
  EXPECT_LT(slowest_refusal, slowest_ok);
}

// With tokens configured, every RPC of coalesce.v1.TensorOps (taken from
// the service descriptor, so a new RPC is covered the day it is added)
// refuses a call without a token before doing anything, and the health
// service still answers without one.
TEST(ServiceAuthTest, EveryRpcNeedsAToken) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  ServerConfig config;
  config.listen = "";
  config.auth_tokens.entries = {
      {"user-token-0123456789abcdef", "team-a", Role::kUser}};
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  std::shared_ptr<grpc::Channel> channel = (*server)->InProcessChannel();
  namespace pb = google::protobuf;
  const pb::ServiceDescriptor* service =
      pb::DescriptorPool::generated_pool()->FindServiceByName(
          v1::TensorOps::service_full_name());
  ASSERT_NE(service, nullptr);
  ASSERT_GE(service->method_count(), 14);
  grpc::GenericStub stub(channel);
  for (int i = 0; i < service->method_count(); ++i) {
    const pb::MethodDescriptor* method = service->method(i);
    // An empty message is a valid request of every type; a client stream
    // of one message and a server stream that ends in an error are both a
    // unary exchange on the wire.
    grpc::Slice empty("", 0);
    grpc::ByteBuffer request(&empty, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context,
                   absl::StrCat("/", service->full_name(), "/", method->name()),
                   grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status s) { done.set_value(std::move(s)); });
    const grpc::Status status = done.get_future().get();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << method->name() << ": " << status.error_message();
  }
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  EXPECT_TRUE(health->Check(&context, request, &response).ok());
}

// A user's request on an untuned shape takes the heuristic choice: tuning
// spends GPU time on the server's behalf, which only admins may ask for.
TEST(ServiceAuthTest, OnlyAdminsStartTunings) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  ServerConfig config;
  config.listen = "";
  config.selection.autotune = AutotuneMode::kEager;
  config.selection.build_id = "test";
  config.auth_tokens.entries = {
      {"user-token-0123456789abcdef", "team-a", Role::kUser},
      {"admin-token-0123456789abcdef", "ops", Role::kAdmin}};
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::TensorOps::NewStub((*server)->InProcessChannel());
  std::mt19937 rng(6);
  v1::TransposeRequest request;
  *request.mutable_input() =
      RandomTensor({96, 80}, v1::DATA_TYPE_FLOAT32, &rng);
  request.mutable_options()->set_report(true);
  for (const auto& [token, source] :
       {std::pair<const char*, const char*>{"user-token-0123456789abcdef",
                                            "heuristic"},
        {"admin-token-0123456789abcdef", "cache"}}) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    v1::TransposeResponse response;
    const grpc::Status status = stub->Transpose(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.report().selection_source(), source) << token;
    EXPECT_EQ(response.output().raw(),
              PermuteReference(request.input().raw(), {96, 80}, {1, 0}, 4));
  }
  EXPECT_EQ((*server)->selector->tunings(), 1);

  v1::ExplainSelectionRequest explain;
  *explain.mutable_transpose() = request;
  explain.set_measure(true);
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer user-token-0123456789abcdef");
  v1::ExplainSelectionResponse response;
  const grpc::Status denied =
      stub->ExplainSelection(&context, explain, &response);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(denied.error_message(), HasSubstr("ExplainSelection.measure"));
}

TEST(ServiceHealthTest, DeviceFaultTurnsHealthNotServing) {
  FaultyBackend backend;
  ServerConfig config;
  config.listen = "";
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, &backend, "test");
  ASSERT_TRUE(server.ok()) << server.status();
  std::shared_ptr<grpc::Channel> channel = (*server)->InProcessChannel();
  EXPECT_EQ(CheckHealth(channel, ""),
            grpc::health::v1::HealthCheckResponse::SERVING);

  std::mt19937 rng(1);
  v1::TransposeRequest request;
  *request.mutable_input() = RandomTensor({4, 4}, v1::DATA_TYPE_FLOAT32, &rng);
  grpc::ClientContext context;
  v1::TransposeResponse response;
  const grpc::Status status =
      v1::TensorOps::NewStub(channel)->Transpose(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(status.error_message(), HasSubstr("injected device fault"));
  EXPECT_EQ(CheckHealth(channel, ""),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CheckHealth(channel, "coalesce.v1.TensorOps"),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CheckHealth(channel, "inference.GRPCInferenceService"),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
}

TEST(ServerTcpTest, PortZeroBindsAFreePort) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  ServerConfig config;
  config.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port, 0);
  auto stub = v1::TensorOps::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port),
                          grpc::InsecureChannelCredentials()));
  std::mt19937 rng(2);
  v1::TransposeRequest request;
  *request.mutable_input() = RandomTensor({5, 3}, v1::DATA_TYPE_BFLOAT16, &rng);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  v1::TransposeResponse response;
  const grpc::Status status = stub->Transpose(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.output().raw(),
            PermuteReference(request.input().raw(), {5, 3}, {1, 0}, 2));
}

TEST(ServerTcpTest, UnbindableAddressIsUnavailable) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  ServerConfig config;
  config.listen = "203.0.113.1:0";  // TEST-NET-3: not an address of this host
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("203.0.113.1:0"));
}

}  // namespace
}  // namespace coalesce
