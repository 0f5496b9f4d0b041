// The coalesce_* metrics through the real service: requests over an
// in-process channel to a server built by BuildServer, then the registry's
// exposition parsed and checked series by series against what the requests
// and their KernelReports say. A backend that wraps the CPU backend and
// reports a launch and copy times stands in for the GPU figures.
#include "server/metrics/prometheus_service_metrics.h"

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/registry.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/server.h"

namespace coalesce {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

using Labels = std::vector<std::pair<std::string, std::string>>;

// `name{a="x",...}` as prometheus-cpp writes it: labels sorted by name, a
// histogram bucket's "le" last.
std::string Key(const std::string& name, const Labels& labels) {
  if (labels.empty()) return name;
  std::map<std::string, std::string> sorted(labels.begin(), labels.end());
  std::string le;
  if (auto it = sorted.find("le"); it != sorted.end()) {
    le = absl::StrCat(",le=\"", it->second, "\"");
    sorted.erase(it);
  }
  std::vector<std::string> parts;
  for (const auto& [label, value] : sorted) {
    parts.push_back(absl::StrCat(label, "=\"", value, "\""));
  }
  if (parts.empty()) return absl::StrCat(name, "{", le.substr(1), "}");
  return absl::StrCat(name, "{", absl::StrJoin(parts, ","), le, "}");
}

// A kernel series' labels (--metrics_detail=basic).
Labels KernelOf(const std::string& op, const std::string& variant) {
  return {{"op", op}, {"variant", variant}};
}

// Sample lines of an exposition, by series. Every line must be a comment or
// `series value`.
std::map<std::string, double> Parse(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, absl::string_view::npos) << line;
    samples[std::string(line.substr(0, space))] =
        std::stod(std::string(line.substr(space + 1)));
  }
  return samples;
}

v1::Tensor RandomTensor(const std::vector<int64_t>& shape, std::mt19937* rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> values(n);
  for (float& v : values) v = uniform(*rng);
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_FLOAT32);
  for (int64_t d : shape) t.add_shape(d);
  t.set_raw(values.data(), values.size() * sizeof(float));
  return t;
}

// Wraps the CPU backend and reports what a GPU backend would: a launch with
// its occupancy and waves, copy times, and a measured copy peak.
class LaunchingBackend final : public Backend {
 public:
  static constexpr double kCopyPeak = 1e10;
  static constexpr double kOccupancy = 0.75;
  static constexpr double kWaves = 2.5;
  static constexpr double kH2d = 0.001;
  static constexpr double kD2h = 0.002;
  static constexpr double kKernel = 0.004;
  static constexpr double kEventOverhead = 0.001;

  LaunchingBackend() : cpu_(CreateCpuBackend(2)), device_(cpu_->device()) {
    device_.measured_copy_bandwidth = kCopyPeak;
    device_.event_overhead_seconds = kEventOverhead;
  }
  BackendKind kind() const override { return cpu_->kind(); }
  const DeviceInfo& device() const override { return device_; }
  const VariantRegistry& registry() const override { return cpu_->registry(); }
  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& host, RunResult* result) override {
    const absl::Status status = cpu_->Execute(v, p, host, result);
    result->h2d_seconds = kH2d;
    result->kernel_seconds = kKernel;
    result->d2h_seconds = kD2h;
    // A sampled launch has no span, as on the CUDA backend.
    result->kernel_begin = result->kernel_end = 0;
    if (!sample_) {
      result->kernel_begin = next_begin_;
      result->kernel_end = next_begin_ + kKernel;
      next_begin_ += span_spacing_;
    }
    result->launch.launches = 1;
    result->launch.theoretical_occupancy = kOccupancy;
    result->launch.waves = kWaves;
    if (sample_) {
      result->sampled = true;
      result->achieved_occupancy = kAchievedOccupancy;
      result->dram_bytes_per_second = kDramBytesPerSecond;
    }
    result->sample_error = sample_error_;
    return status;
  }

  // Device-sampled counters, as a picked launch of the CUDA backend
  // returns them.
  static constexpr double kAchievedOccupancy = 0.62;
  static constexpr double kDramBytesPerSecond = 3.5e12;
  void Sample() { sample_ = true; }
  // Where the next launches' spans begin after one another's (by default
  // far apart: no overlap).
  void SpaceSpans(double seconds) { span_spacing_ = seconds; }
  void FailSamples(absl::Status why) { sample_error_ = std::move(why); }

 private:
  bool sample_ = false;
  double next_begin_ = 100;
  double span_spacing_ = 10;
  absl::Status sample_error_;
  std::unique_ptr<Backend> cpu_;
  DeviceInfo device_;
};

// A variant that keeps per-shape plans, as cuBLASLt's does; the test sets
// what its cache holds. It implements nothing.
class PlanningVariant final : public KernelVariant {
 public:
  static constexpr char kName[] = "gemm.cpu.planning";
  absl::string_view name() const override { return kName; }
  absl::string_view description() const override { return "plans only"; }
  OpKind op() const override { return OpKind::kGemm; }
  BackendKind backend() const override { return BackendKind::kCpu; }
  absl::Status CanImplement(const Problem&, const DeviceInfo&) const override {
    return absl::UnimplementedError("keeps plans, runs nothing");
  }
  absl::Status Run(const Problem&, const Operands&,
                   ExecContext&) const override {
    return absl::UnimplementedError("keeps plans, runs nothing");
  }
  std::optional<PlanCacheStats> plan_cache() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  void Set(PlanCacheStats stats) {
    absl::MutexLock lock(&mu_);
    stats_ = stats;
  }

 private:
  mutable absl::Mutex mu_;
  PlanCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

// The CPU backend with a registry of one PlanningVariant.
class PlanningBackend final : public Backend {
 public:
  PlanningBackend() : cpu_(CreateCpuBackend(1)) {
    auto v = std::make_unique<PlanningVariant>();
    variant_ = v.get();
    registry_.Add(std::move(v));
  }
  BackendKind kind() const override { return cpu_->kind(); }
  const DeviceInfo& device() const override { return cpu_->device(); }
  const VariantRegistry& registry() const override { return registry_; }
  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& host, RunResult* result) override {
    return cpu_->Execute(v, p, host, result);
  }
  PlanningVariant* variant() { return variant_; }

 private:
  std::unique_ptr<Backend> cpu_;
  VariantRegistry registry_;
  PlanningVariant* variant_;
};

class ServiceMetricsTest : public testing::Test {
 protected:
  void Start(std::unique_ptr<Backend> backend) {
    stub_.reset();
    server_.reset();  // before the backend it serves
    backend_ = std::move(backend);
    ServerConfig config;
    config.listen = "";  // in-process only
    absl::StatusOr<std::unique_ptr<RunningServer>> server =
        BuildServer(config, backend_.get(), "test");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    stub_ = v1::TensorOps::NewStub(server_->InProcessChannel(args));
  }
  void SetUp() override { Start(CreateCpuBackend(2)); }
  // Serves a LaunchingBackend instead; the test steers it by the pointer.
  LaunchingBackend* StartLaunching() {
    auto backend = std::make_unique<LaunchingBackend>();
    LaunchingBackend* launching = backend.get();
    Start(std::move(backend));
    return launching;
  }
  // The served device's labels: neither test backend has a GPU ordinal or
  // UUID, so those labels are empty.
  Labels DeviceLabels() const {
    return {{"device", backend_->device().name}, {"gpu", ""}, {"gpu_uuid", ""}};
  }

  std::map<std::string, double> Scrape() {
    return Parse(server_->registry->Serialize());
  }

  v1::TransposeRequest Transpose(int64_t rows, int64_t cols) {
    v1::TransposeRequest request;
    *request.mutable_input() = RandomTensor({rows, cols}, &rng_);
    request.mutable_options()->set_report(true);
    return request;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RunningServer> server_;
  std::unique_ptr<v1::TensorOps::Stub> stub_;
  std::mt19937 rng_{7};
};

TEST(SizeBucketTest, PowersOfFourFromOneMebibyte) {
  using metrics::SizeBucket;
  using metrics::SizeBucketName;
  constexpr int64_t kMiB = int64_t{1} << 20;
  EXPECT_EQ(SizeBucketName(SizeBucket(0)), "le_1MiB");
  EXPECT_EQ(SizeBucketName(SizeBucket(kMiB)), "le_1MiB");
  EXPECT_EQ(SizeBucketName(SizeBucket(kMiB + 1)), "le_4MiB");
  EXPECT_EQ(SizeBucketName(SizeBucket(64 * kMiB)), "le_64MiB");
  EXPECT_EQ(SizeBucketName(SizeBucket(1024 * kMiB)), "le_1GiB");
  EXPECT_EQ(SizeBucketName(SizeBucket(4096 * kMiB)), "le_4GiB");
  EXPECT_EQ(SizeBucketName(SizeBucket(4096 * kMiB + 1)), "gt_4GiB");
  EXPECT_EQ(SizeBucket(int64_t{1} << 62), metrics::kNumSizeBuckets - 1);
}

TEST_F(ServiceMetricsTest, KernelOpSeriesExistBeforeAnyRequest) {
  const std::map<std::string, double> s = Scrape();
  for (const char* op :
       {"transpose", "gemm", "convert_layout", "gelu_layer_norm"}) {
    EXPECT_EQ(
        s.at(Key("coalesce_requests_total", {{"op", op}, {"code", "OK"}})), 0);
    EXPECT_EQ(s.at(Key("coalesce_requests_in_flight", {{"op", op}})), 0);
    EXPECT_EQ(
        s.at(Key("coalesce_request_duration_seconds_count", {{"op", op}})), 0);
    EXPECT_EQ(s.at(Key("coalesce_request_queue_seconds_count", {{"op", op}})),
              0);
  }
  // Other RPCs and other codes appear with their first use.
  EXPECT_EQ(
      s.count(Key("coalesce_requests_in_flight", {{"op", "get_server_info"}})),
      0u);
  EXPECT_EQ(s.count(Key("coalesce_requests_total",
                        {{"op", "transpose"}, {"code", "INVALID_ARGUMENT"}})),
            0u);
  const Labels device = DeviceLabels();
  EXPECT_GT(s.at(Key("coalesce_device_memory_used_bytes", device)), 1 << 20);
  EXPECT_GT(s.at(Key("coalesce_device_memory_total_bytes", device)),
            s.at(Key("coalesce_device_memory_used_bytes", device)));
  EXPECT_EQ(s.at(Key("coalesce_device_pinned_staging_bytes", device)), 0);
  EXPECT_EQ(s.at(Key("coalesce_device_queue_requests", device)), 0);
  EXPECT_EQ(s.at(Key("coalesce_device_kernel_seconds_total", device)), 0);
  EXPECT_EQ(s.at(Key("coalesce_build_info", {{"version", COALESCE_VERSION},
                                             {"git_sha", COALESCE_GIT_SHA},
                                             {"backend", "cpu"},
                                             {"cuda_runtime", ""}})),
            1);
  // The process, the tensor store and shared memory, empty.
  EXPECT_GT(s.at("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(s.at("process_open_fds"), 0);
  EXPECT_EQ(s.at("coalesce_tensor_store_bytes"), 0);
  EXPECT_EQ(s.at("coalesce_tensor_store_tensors"), 0);
  EXPECT_EQ(s.at(Key("coalesce_shared_memory_regions", {{"kind", "system"}})),
            0);
  // Kernel and selection series appear with the first kernel of their
  // combination.
  const std::string text = server_->registry->Serialize();
  EXPECT_THAT(text, Not(HasSubstr("coalesce_kernel_seconds_bucket")));
  EXPECT_THAT(text, Not(HasSubstr("coalesce_selections_total{")));
}

// A GPU's series carry its ordinal and UUID, as DCGM-exporter's gpu and
// UUID labels do, so that the two join.
TEST(DeviceLabelsTest, GpuOrdinalAndUuidOnCudaOnly) {
  DeviceInfo gpu;
  gpu.backend = BackendKind::kCuda;
  gpu.name = "NVIDIA H200";
  gpu.ordinal = 3;
  gpu.uuid = "GPU-0b5f3c4e-8d7a-6f21-9e0d-1a2b3c4d5e6f";
  EXPECT_EQ(metrics::DeviceLabels(gpu),
            (metrics::Labels{
                {"device", "NVIDIA H200"},
                {"gpu", "3"},
                {"gpu_uuid", "GPU-0b5f3c4e-8d7a-6f21-9e0d-1a2b3c4d5e6f"}}));
  DeviceInfo cpu;
  cpu.name = "x86_64 (2 threads)";
  cpu.uuid = "ignored";
  EXPECT_EQ(
      metrics::DeviceLabels(cpu),
      (metrics::Labels{
          {"device", "x86_64 (2 threads)"}, {"gpu", ""}, {"gpu_uuid", ""}}));
}

TEST_F(ServiceMetricsTest, EveryOpIsObserved) {
  grpc::ClientContext c1, c2, c3, c4, c5;
  const v1::TransposeRequest transpose = Transpose(64, 96);
  v1::TransposeResponse transposed;
  ASSERT_TRUE(stub_->Transpose(&c1, transpose, &transposed).ok());

  v1::GemmRequest gemm;
  *gemm.mutable_a() = RandomTensor({16, 32}, &rng_);
  *gemm.mutable_b() = RandomTensor({32, 8}, &rng_);
  gemm.mutable_options()->set_report(true);
  v1::GemmResponse gemm_out;
  ASSERT_TRUE(stub_->Gemm(&c2, gemm, &gemm_out).ok());

  v1::ConvertLayoutRequest layout;
  *layout.mutable_input() = RandomTensor({2, 3, 4, 5}, &rng_);
  layout.mutable_layouts()->set_from(v1::LAYOUT_NCHW);
  layout.mutable_layouts()->set_to(v1::LAYOUT_NHWC);
  layout.mutable_options()->set_report(true);
  v1::ConvertLayoutResponse layout_out;
  ASSERT_TRUE(stub_->ConvertLayout(&c3, layout, &layout_out).ok());

  v1::GeluLayerNormRequest ln;
  *ln.mutable_x() = RandomTensor({8, 64}, &rng_);
  ln.mutable_options()->set_report(true);
  v1::GeluLayerNormResponse ln_out;
  ASSERT_TRUE(stub_->GeluLayerNorm(&c4, ln, &ln_out).ok());

  v1::GetServerInfoResponse info;
  ASSERT_TRUE(
      stub_->GetServerInfo(&c5, v1::GetServerInfoRequest(), &info).ok());

  const std::map<std::string, double> s = Scrape();
  struct Case {
    const char* op;
    const google::protobuf::Message& request;
    const google::protobuf::Message& response;
    const v1::KernelReport* report;
  };
  for (const Case& c :
       {Case{"transpose", transpose, transposed, &transposed.report()},
        Case{"gemm", gemm, gemm_out, &gemm_out.report()},
        Case{"convert_layout", layout, layout_out, &layout_out.report()},
        Case{"gelu_layer_norm", ln, ln_out, &ln_out.report()},
        Case{"get_server_info", v1::GetServerInfoRequest(), info, nullptr}}) {
    SCOPED_TRACE(c.op);
    const Labels op = {{"op", c.op}};
    EXPECT_EQ(
        s.at(Key("coalesce_requests_total", {{"op", c.op}, {"code", "OK"}})),
        1);
    EXPECT_EQ(s.at(Key("coalesce_request_duration_seconds_count", op)), 1);
    EXPECT_GT(s.at(Key("coalesce_request_duration_seconds_sum", op)), 0);
    EXPECT_EQ(s.at(Key("coalesce_requests_in_flight", op)), 0);
    EXPECT_EQ(s.at(Key("coalesce_request_bytes_total", op)),
              c.request.ByteSizeLong());
    EXPECT_EQ(s.at(Key("coalesce_response_bytes_total", op)),
              c.response.ByteSizeLong());
    if (c.report == nullptr) continue;
    EXPECT_EQ(s.at(Key("coalesce_requests_queued", op)), 0);
    EXPECT_EQ(s.at(Key("coalesce_request_queue_seconds_count", op)), 1);
    // The CPU backend copies nothing.
    EXPECT_EQ(s.at(Key("coalesce_request_h2d_seconds_sum", op)), 0);
    EXPECT_EQ(s.at(Key("coalesce_request_d2h_seconds_count", op)), 1);
    const Labels kernel = KernelOf(c.op, c.report->variant());
    // The exported figures are the report's (prometheus-cpp writes 16
    // significant digits).
    EXPECT_EQ(s.at(Key("coalesce_kernel_seconds_count", kernel)), 1);
    EXPECT_DOUBLE_EQ(s.at(Key("coalesce_kernel_seconds_sum", kernel)),
                     c.report->kernel_seconds());
    EXPECT_DOUBLE_EQ(
        s.at(Key("coalesce_kernel_bandwidth_bytes_per_second_sum", kernel)),
        c.report->achieved_bytes_per_second());
    EXPECT_GT(c.report->achieved_bytes_per_second(), 0);
    EXPECT_GT(c.report->peak_bandwidth_fraction(), 0);
    EXPECT_EQ(
        s.at(Key("coalesce_selections_total", {{"op", c.op},
                                               {"variant", c.report->variant()},
                                               {"source", "heuristic"}})),
        1);
    const std::string flops =
        Key("coalesce_kernel_flops_per_second_sum", kernel);
    if (std::string(c.op) == "gemm") {
      EXPECT_DOUBLE_EQ(s.at(flops), c.report->achieved_flops_per_second());
    } else {
      EXPECT_EQ(s.count(flops), 0u);
    }
  }
  // CPU variants report no launch.
  EXPECT_THAT(server_->registry->Serialize(),
              Not(HasSubstr("coalesce_kernel_theoretical_occupancy_ratio{")));
}

TEST_F(ServiceMetricsTest, FullDetailAddsDtypeAndSizeBucket) {
  backend_ = nullptr;
  server_.reset();
  stub_.reset();
  backend_ = CreateCpuBackend(2);
  ServerConfig config;
  config.listen = "";
  config.metrics_detail = MetricsDetail::kFull;
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend_.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  stub_ = v1::TensorOps::NewStub(server_->InProcessChannel());
  grpc::ClientContext context;
  v1::TransposeResponse response;
  ASSERT_TRUE(stub_->Transpose(&context, Transpose(16, 24), &response).ok());
  const std::map<std::string, double> s = Scrape();
  Labels kernel = KernelOf("transpose", response.report().variant());
  EXPECT_EQ(s.count(Key("coalesce_kernel_seconds_count", kernel)), 0u);
  kernel.emplace_back("dtype", "float32");
  kernel.emplace_back("size_bucket", "le_1MiB");
  EXPECT_EQ(s.at(Key("coalesce_kernel_seconds_count", kernel)), 1);
}

TEST_F(ServiceMetricsTest, ErrorsAreCountedByCode) {
  {
    grpc::ClientContext context;
    v1::TransposeResponse response;
    // No input at all: rejected by the codec.
    EXPECT_EQ(stub_->Transpose(&context, v1::TransposeRequest(), &response)
                  .error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext context;
    v1::TransposeRequest request = Transpose(4, 4);
    request.mutable_options()->set_variant("transpose.cpu.no_such_variant");
    v1::TransposeResponse response;
    // Rejected by selection, after decoding.
    EXPECT_EQ(stub_->Transpose(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  const std::map<std::string, double> s = Scrape();
  EXPECT_EQ(s.at(Key("coalesce_requests_total",
                     {{"op", "transpose"}, {"code", "INVALID_ARGUMENT"}})),
            2);
  EXPECT_EQ(s.at(Key("coalesce_requests_total",
                     {{"op", "transpose"}, {"code", "OK"}})),
            0);
  EXPECT_EQ(s.at(Key("coalesce_request_duration_seconds_count",
                     {{"op", "transpose"}})),
            2);
  EXPECT_EQ(s.at(Key("coalesce_response_bytes_total", {{"op", "transpose"}})),
            0);
  EXPECT_GT(s.at(Key("coalesce_request_bytes_total", {{"op", "transpose"}})),
            64);
  // Neither reached the backend, and neither is left queued.
  EXPECT_EQ(s.at(Key("coalesce_requests_queued", {{"op", "transpose"}})), 0);
  EXPECT_EQ(
      s.at(Key("coalesce_request_queue_seconds_count", {{"op", "transpose"}})),
      0);
}

TEST_F(ServiceMetricsTest, ForcedVariantsAreCountedAsForced) {
  const std::string variant(
      backend_->registry().ForOp(OpKind::kTranspose)[0]->name());
  grpc::ClientContext context;
  v1::TransposeRequest request = Transpose(8, 8);
  request.mutable_options()->set_variant(variant);
  v1::TransposeResponse response;
  ASSERT_TRUE(stub_->Transpose(&context, request, &response).ok());
  const std::map<std::string, double> s = Scrape();
  EXPECT_EQ(s.at(Key("coalesce_selections_total", {{"op", "transpose"},
                                                   {"variant", variant},
                                                   {"source", "forced"}})),
            1);
}

TEST_F(ServiceMetricsTest, ConcurrentRequestsAreAllCounted) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      std::mt19937 rng(t);
      v1::TransposeRequest request;
      *request.mutable_input() = RandomTensor({32, 32 + t}, &rng);
      for (int i = 0; i < kPerThread; ++i) {
        grpc::ClientContext context;
        v1::TransposeResponse response;
        EXPECT_TRUE(stub_->Transpose(&context, request, &response).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::map<std::string, double> s = Scrape();
  EXPECT_EQ(s.at(Key("coalesce_requests_total",
                     {{"op", "transpose"}, {"code", "OK"}})),
            kThreads * kPerThread);
  EXPECT_EQ(s.at(Key("coalesce_requests_in_flight", {{"op", "transpose"}})), 0);
  EXPECT_EQ(s.at(Key("coalesce_requests_queued", {{"op", "transpose"}})), 0);
  EXPECT_EQ(
      s.at(Key("coalesce_request_h2d_seconds_count", {{"op", "transpose"}})),
      kThreads * kPerThread);
}

TEST_F(ServiceMetricsTest, LaunchFiguresAndCopyPeakWhenTheBackendHasThem) {
  Start(std::make_unique<LaunchingBackend>());
  grpc::ClientContext context;
  v1::TransposeResponse response;
  ASSERT_TRUE(stub_->Transpose(&context, Transpose(128, 64), &response).ok());
  const v1::KernelReport& report = response.report();
  const std::map<std::string, double> s = Scrape();
  const Labels kernel = KernelOf("transpose", report.variant());
  EXPECT_EQ(s.at(Key("coalesce_kernel_theoretical_occupancy_ratio", kernel)),
            LaunchingBackend::kOccupancy);
  EXPECT_EQ(s.at(Key("coalesce_kernel_waves", kernel)),
            LaunchingBackend::kWaves);
  EXPECT_DOUBLE_EQ(
      report.peak_bandwidth_fraction(),
      report.achieved_bytes_per_second() / LaunchingBackend::kCopyPeak);
  EXPECT_EQ(
      s.at(Key("coalesce_request_h2d_seconds_sum", {{"op", "transpose"}})),
      LaunchingBackend::kH2d);
  EXPECT_EQ(
      s.at(Key("coalesce_request_d2h_seconds_sum", {{"op", "transpose"}})),
      LaunchingBackend::kD2h);
  EXPECT_EQ(
      s.at(Key("coalesce_device_copy_peak_bytes_per_second", DeviceLabels())),
      LaunchingBackend::kCopyPeak);
}

// The busy counter takes the events' own cost off each event-timed launch;
// a sampled launch's time is the kernels' own and counts whole.
TEST_F(ServiceMetricsTest, DeviceKernelTimeLessTheEventOverhead) {
  LaunchingBackend* launching = StartLaunching();
  const Labels device = DeviceLabels();
  grpc::ClientContext context;
  v1::TransposeResponse response;
  ASSERT_TRUE(stub_->Transpose(&context, Transpose(128, 64), &response).ok());
  std::map<std::string, double> s = Scrape();
  EXPECT_EQ(s.at(Key("coalesce_device_event_overhead_seconds", device)),
            LaunchingBackend::kEventOverhead);
  // Spans on the device's clock lose a little to rounding.
  EXPECT_NEAR(s.at(Key("coalesce_device_kernel_seconds_total", device)),
              LaunchingBackend::kKernel - LaunchingBackend::kEventOverhead,
              1e-12);
  const Labels kernel = KernelOf("transpose", response.report().variant());
  EXPECT_DOUBLE_EQ(s.at(Key("coalesce_kernel_seconds_sum", kernel)),
                   LaunchingBackend::kKernel);

  launching->Sample();
  grpc::ClientContext sampled_context;
  ASSERT_TRUE(
      stub_->Transpose(&sampled_context, Transpose(128, 64), &response).ok());
  s = Scrape();
  EXPECT_NEAR(s.at(Key("coalesce_device_kernel_seconds_total", device)),
              2 * LaunchingBackend::kKernel - LaunchingBackend::kEventOverhead,
              1e-12);
}

// Launches that overlap on the device's clock (several streams) count the
// time they cover once, not each its own.
TEST_F(ServiceMetricsTest, OverlappingLaunchesCountTheirUnion) {
  LaunchingBackend* launching = StartLaunching();
  const Labels device = DeviceLabels();
  constexpr double k = LaunchingBackend::kKernel;
  constexpr double o = LaunchingBackend::kEventOverhead;
  launching->SpaceSpans(k / 2);
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    v1::TransposeResponse response;
    ASSERT_TRUE(stub_->Transpose(&context, Transpose(128, 64), &response).ok());
    EXPECT_DOUBLE_EQ(response.report().kernel_seconds(), k);
  }
  // [0, k - o], [k/2, 3k/2 - o], [k, 2k - o] from the first begin: their
  // union is 2k - o long, where their sum would be 3 (k - o).
  EXPECT_NEAR(Scrape().at(Key("coalesce_device_kernel_seconds_total", device)),
              2 * k - o, 1e-12);
}

TEST_F(ServiceMetricsTest, SampledCountersOfSampledRequestsOnly) {
  LaunchingBackend* launching = StartLaunching();
  grpc::ClientContext unsampled_context;
  v1::TransposeResponse response;
  ASSERT_TRUE(
      stub_->Transpose(&unsampled_context, Transpose(128, 64), &response).ok());
  // No launch sampled yet: none of the sampled families has a series.
  const std::string before = server_->registry->Serialize();
  for (const char* family : {"coalesce_kernel_achieved_occupancy_ratio_",
                             "coalesce_kernel_sampled_dram_bytes_per_second_",
                             "coalesce_kernel_profile_samples_total{"}) {
    EXPECT_THAT(before, Not(HasSubstr(family))) << family;
  }

  launching->Sample();
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->Transpose(&context, Transpose(128, 64), &response).ok());
  }
  const std::map<std::string, double> s = Scrape();
  const Labels kernel = KernelOf("transpose", response.report().variant());
  EXPECT_EQ(s.at(Key("coalesce_kernel_achieved_occupancy_ratio_count", kernel)),
            2);
  EXPECT_DOUBLE_EQ(
      s.at(Key("coalesce_kernel_achieved_occupancy_ratio_sum", kernel)),
      2 * LaunchingBackend::kAchievedOccupancy);
  Labels bucket = kernel;
  bucket.emplace_back("le", "0.65");
  EXPECT_EQ(
      s.at(Key("coalesce_kernel_achieved_occupancy_ratio_bucket", bucket)), 2);
  bucket.back().second = "0.6";
  EXPECT_EQ(
      s.at(Key("coalesce_kernel_achieved_occupancy_ratio_bucket", bucket)), 0);
  EXPECT_EQ(
      s.at(Key("coalesce_kernel_sampled_dram_bytes_per_second_count", kernel)),
      2);
  EXPECT_DOUBLE_EQ(
      s.at(Key("coalesce_kernel_sampled_dram_bytes_per_second_sum", kernel)),
      2 * LaunchingBackend::kDramBytesPerSecond);
  Labels sampled = kernel;
  sampled.emplace_back("outcome", "sampled");
  EXPECT_EQ(s.at(Key("coalesce_kernel_profile_samples_total", sampled)), 2);
  Labels failed = kernel;
  failed.emplace_back("outcome", "failed");
  EXPECT_EQ(s.count(Key("coalesce_kernel_profile_samples_total", failed)), 0u);
  // Sampled requests keep their kernel time.
  EXPECT_EQ(s.at(Key("coalesce_kernel_seconds_count", kernel)), 3);
}

TEST_F(ServiceMetricsTest, FailedSamplesAreCountedAndKeptOutOfKernelTimes) {
  auto backend = std::make_unique<LaunchingBackend>();
  backend->FailSamples(absl::FailedPreconditionError(
      "the sampled range held 2 kernels but the variant launched 1"));
  Start(std::move(backend));
  grpc::ClientContext context;
  v1::TransposeResponse response;
  ASSERT_TRUE(stub_->Transpose(&context, Transpose(128, 64), &response).ok());
  const std::map<std::string, double> s = Scrape();
  const Labels kernel = KernelOf("transpose", response.report().variant());
  Labels failed = kernel;
  failed.emplace_back("outcome", "failed");
  EXPECT_EQ(s.at(Key("coalesce_kernel_profile_samples_total", failed)), 1);
  EXPECT_EQ(s.at(Key("coalesce_kernel_seconds_count", kernel)), 0);
  EXPECT_EQ(
      s.count(Key("coalesce_kernel_achieved_occupancy_ratio_count", kernel)),
      0u);
  // The request itself succeeded and its stages are observed.
  EXPECT_EQ(s.at(Key("coalesce_requests_total",
                     {{"op", "transpose"}, {"code", "OK"}})),
            1);
  EXPECT_EQ(
      s.at(Key("coalesce_request_h2d_seconds_count", {{"op", "transpose"}})),
      1);
}

TEST_F(ServiceMetricsTest, PlanCachesOfTheVariantsThatKeepThem) {
  // The CPU backend's variants keep no plans: no series.
  EXPECT_THAT(server_->registry->Serialize(),
              Not(HasSubstr("coalesce_variant_plans{")));

  auto backend = std::make_unique<PlanningBackend>();
  PlanningVariant* variant = backend->variant();
  variant->Set({3, 4096, 0});
  Start(std::move(backend));
  const Labels label = {{"variant", PlanningVariant::kName}};
  std::map<std::string, double> s = Scrape();
  EXPECT_EQ(s.at(Key("coalesce_variant_plans", label)), 3);
  EXPECT_EQ(s.at(Key("coalesce_variant_plan_capacity", label)), 4096);
  EXPECT_EQ(s.at(Key("coalesce_variant_plan_evictions_total", label)), 0);

  variant->Set({4096, 4096, 10});
  s = Scrape();
  EXPECT_EQ(s.at(Key("coalesce_variant_plans", label)), 4096);
  EXPECT_EQ(s.at(Key("coalesce_variant_plan_evictions_total", label)), 10);
  variant->Set({4096, 4096, 25});
  EXPECT_EQ(Scrape().at(Key("coalesce_variant_plan_evictions_total", label)),
            25);
}

}  // namespace
}  // namespace coalesce
