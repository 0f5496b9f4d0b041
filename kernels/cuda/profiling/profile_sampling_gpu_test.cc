// Device-sampled counters (--profile_sampling) through the CUDA backend's
// Execute: the counters are read and plausible, every Nth launch is picked,
// outputs stay right, and concurrent requests neither fail nor leak kernels
// into another's range. Skips, with the reason, where no CUDA device is
// visible or the counters are restricted to administrators.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_backend.h"

namespace coalesce {
namespace {

// 8192^2 float32: 512 MiB moved, far above the 60 MB L2, so DRAM traffic is
// close to the bytes the op must move.
constexpr int64_t kRows = 8192;
constexpr int64_t kCols = 8192;

class ProfileSamplingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<Backend>> b = CreateCudaBackend(0);
    if (!b.ok()) {
      skip_reason_ = new std::string("no GPU: " + b.status().ToString());
      return;
    }
    backend_ = std::move(*b).release();
    absl::StatusOr<int64_t> interval = backend_->EnableProfileSampling(1.0);
    if (interval.status().code() == absl::StatusCode::kPermissionDenied) {
      skip_reason_ = new std::string(interval.status().ToString());
    } else {
      enabled_ = new absl::StatusOr<int64_t>(interval);
    }
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }
  void SetUp() override {
    if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
    ASSERT_TRUE(enabled_->ok()) << enabled_->status();
    ASSERT_EQ(**enabled_, 1);
  }

  static const KernelVariant& Variant(absl::string_view name) {
    const KernelVariant* v = backend_->registry().Find(name);
    EXPECT_NE(v, nullptr) << name;
    return *v;
  }

  // A transpose of distinct values, checked in full; *seconds, when given,
  // is the wall time of the Execute.
  static void RunTranspose(const KernelVariant& v, RunResult* run,
                           double* seconds = nullptr) {
    TransposeProblem t;
    t.rows = kRows;
    t.cols = kCols;
    const Problem p = t;
    ASSERT_TRUE(v.CanImplement(p, backend_->device()).ok());
    std::vector<float> in(kRows * kCols), out(kRows * kCols, -1.0f);
    for (int64_t i = 0; i < kRows * kCols; ++i) in[i] = static_cast<float>(i);
    Operands host;
    host.inputs.push_back(in.data());
    host.outputs.push_back(out.data());
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(backend_->Execute(v, p, host, run).ok());
    if (seconds != nullptr) {
      *seconds = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - start)
                     .count();
    }
    int64_t wrong = 0;
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kCols; ++c) {
        wrong += out[c * kRows + r] != in[r * kCols + c];
      }
    }
    EXPECT_EQ(wrong, 0);
  }

  static Backend* backend_;
  static std::string* skip_reason_;
  static absl::StatusOr<int64_t>* enabled_;
};
Backend* ProfileSamplingTest::backend_ = nullptr;
std::string* ProfileSamplingTest::skip_reason_ = nullptr;
absl::StatusOr<int64_t>* ProfileSamplingTest::enabled_ = nullptr;

TEST_F(ProfileSamplingTest, ReadsPlausibleCountersOfATranspose) {
  const KernelVariant& v = Variant("transpose.cuda.smem_padded");
  RunResult warm, run;
  RunTranspose(v, &warm);  // loads the module
  RunTranspose(v, &run);
  ASSERT_TRUE(run.sample_error.ok()) << run.sample_error;
  ASSERT_TRUE(run.sampled);
  const double moved = 2.0 * kRows * kCols * sizeof(float);
  const double achieved = moved / run.kernel_seconds;
  std::printf(
      "smem_padded 8192^2 float32: achieved occupancy %.3f (theoretical "
      "%.3f), DRAM %.3g B/s, bytes moved over GPU time %.3g B/s, GPU time "
      "%.3g s\n",
      run.achieved_occupancy, run.launch.theoretical_occupancy,
      run.dram_bytes_per_second, achieved, run.kernel_seconds);
  EXPECT_GT(run.achieved_occupancy, 0.05);
  EXPECT_LE(run.achieved_occupancy, 1.0);
  // Achieved occupancy cannot exceed the theoretical one by more than
  // rounding.
  EXPECT_LE(run.achieved_occupancy, run.launch.theoretical_occupancy + 0.01);
  // Reads and writes reach DRAM once each at this size: the counted rate is
  // the op's within the tail of stray traffic.
  EXPECT_GT(run.dram_bytes_per_second, 0.8 * achieved);
  EXPECT_LT(run.dram_bytes_per_second, 1.25 * achieved);
  EXPECT_GT(run.kernel_seconds, 0);
}

TEST_F(ProfileSamplingTest, SamplesEveryKernelOfAMultiKernelVariant) {
  const KernelVariant& v = Variant("gelu_layer_norm.cuda.unfused");
  GeluLnProblem ln;
  ln.rows = 4096;
  ln.hidden = 1024;
  ln.has_bias = true;
  ln.has_residual = true;  // the residual add is the third kernel
  const Problem p = ln;
  ASSERT_TRUE(v.CanImplement(p, backend_->device()).ok());
  const OperandSizes sizes = OperandBytes(p);
  std::vector<std::vector<char>> inputs, outputs;
  Operands host;
  for (int64_t b : sizes.inputs) {
    inputs.emplace_back(b, 0);
    for (int64_t i = 0; i < b / 4; ++i) {
      const float x = 0.001f * static_cast<float>(i % 997);
      std::memcpy(inputs.back().data() + 4 * i, &x, 4);
    }
    host.inputs.push_back(b > 0 ? inputs.back().data() : nullptr);
  }
  for (int64_t b : sizes.outputs) {
    outputs.emplace_back(b, 0);
    host.outputs.push_back(b > 0 ? outputs.back().data() : nullptr);
  }
  RunResult warm, run;
  ASSERT_TRUE(backend_->Execute(v, p, host, &warm).ok());
  ASSERT_TRUE(backend_->Execute(v, p, host, &run).ok());
  // Three kernels, each its own range: the range count matched the
  // variant's launches or sample_error would say otherwise.
  EXPECT_EQ(run.launch.launches, 3);
  ASSERT_TRUE(run.sample_error.ok()) << run.sample_error;
  EXPECT_TRUE(run.sampled);
  EXPECT_GT(run.achieved_occupancy, 0);
  EXPECT_GT(run.dram_bytes_per_second, 0);
}

TEST_F(ProfileSamplingTest, PicksEveryNthLaunch) {
  const KernelVariant& v = Variant("transpose.cuda.smem_padded");
  absl::StatusOr<int64_t> interval = backend_->EnableProfileSampling(0.5);
  ASSERT_TRUE(interval.ok()) << interval.status();
  EXPECT_EQ(*interval, 2);
  int sampled = 0;
  double sampled_seconds = 0, unsampled_seconds = 0;
  double sampled_kernel = 0, unsampled_kernel = 0;
  for (int i = 0; i < 4; ++i) {
    RunResult run;
    double seconds = 0;
    RunTranspose(v, &run, &seconds);
    EXPECT_TRUE(run.sample_error.ok()) << run.sample_error;
    sampled += run.sampled;
    (run.sampled ? sampled_seconds : unsampled_seconds) += seconds;
    (run.sampled ? sampled_kernel : unsampled_kernel) += run.kernel_seconds;
  }
  EXPECT_EQ(sampled, 2);
  // What sampling costs a request (staging copies included), and the
  // kernel time of both: the profiler's GPU time when sampled, events when
  // not (an enabled profiler outside a range must not slow the kernel).
  std::printf(
      "Execute of a 8192^2 float32 transpose: %.2f ms sampled, %.2f ms "
      "unsampled; kernel %.1f us sampled (device), %.1f us unsampled "
      "(events)\n",
      sampled_seconds / 2 * 1e3, unsampled_seconds / 2 * 1e3,
      sampled_kernel / 2 * 1e6, unsampled_kernel / 2 * 1e6);
  ASSERT_TRUE(backend_->EnableProfileSampling(1.0).ok());
}

TEST_F(ProfileSamplingTest, RejectsFractionsOutsideZeroToOne) {
  for (double f : {0.0, -0.5, 1.5}) {
    EXPECT_EQ(backend_->EnableProfileSampling(f).status().code(),
              absl::StatusCode::kInvalidArgument)
        << f;
  }
}

// Four lanes at once with every launch picked: one range at a time, the
// others run unsampled, and no range holds another request's kernels.
TEST_F(ProfileSamplingTest, ConcurrentRequestsStayCorrectAndUnmixed) {
  const KernelVariant& v = Variant("transpose.cuda.vec16");
  constexpr int kThreads = 4;
  constexpr int kPerThread = 4;
  std::vector<std::thread> threads;
  std::vector<int> sampled(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        RunResult run;
        RunTranspose(v, &run);
        EXPECT_TRUE(run.sample_error.ok()) << run.sample_error;
        sampled[t] += run.sampled;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int total = 0;
  for (int s : sampled) total += s;
  std::printf("%d of %d concurrent launches sampled\n", total,
              kThreads * kPerThread);
  EXPECT_GE(total, 1);
}

}  // namespace
}  // namespace coalesce
