// Device-level counters from NVML GPM (the fallback of --profile_sampling
// when another profiler holds CUPTI's) through the CUDA backend: under about
// a second of DRAM-bound copies, GPM's DRAM bandwidth is a plausible share
// of the device's peak and its SM occupancy is in (0, 1]. Skips, with the
// reason, where no CUDA device, NVML or GPM support is visible.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <thread>

#include "kernels/cuda/cuda_test_fixture.h"
#include "kernels/cuda/profiling/gpm_reader.h"

namespace coalesce {
namespace {

// 256 MiB a side: the copy's 512 MiB footprint is far above the H200's
// 60 MB L2, so its traffic reaches DRAM.
constexpr int64_t kCopyBytes = int64_t{256} << 20;

class GpmReaderGpuTest : public CudaBackendTest {
 protected:
  void SetUp() override {
    CudaBackendTest::SetUp();
    if (IsSkipped()) return;
    absl::StatusOr<std::unique_ptr<DeviceActivityReader>> r =
        backend_->OpenDeviceActivityReader(0);
    // No NVML, or a GPU without GPM (before Hopper): nothing to check.
    if (r.status().code() == absl::StatusCode::kUnimplemented ||
        r.status().code() == absl::StatusCode::kPermissionDenied) {
      GTEST_SKIP() << "no NVML GPM: " << r.status();
    }
    ASSERT_TRUE(r.ok()) << r.status();
    reader_ = *std::move(r);
  }
  std::unique_ptr<DeviceActivityReader> reader_;
};

TEST_F(GpmReaderGpuTest, IdleDeviceReads) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  absl::StatusOr<DeviceActivity> a = reader_->Read();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GE(a->sm_occupancy, 0);
  EXPECT_LE(a->sm_occupancy, 1);
  EXPECT_GE(a->dram_bytes_per_second, 0);
  EXPECT_GE(a->interval_seconds, 0.2);
  std::printf("idle: SM occupancy %.3f, DRAM %.3g B/s over %.3f s\n",
              a->sm_occupancy, a->dram_bytes_per_second, a->interval_seconds);
}

TEST_F(GpmReaderGpuTest, ReadTooSoonKeepsThePreviousSample) {
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  ASSERT_TRUE(reader_->Read().ok());
  absl::StatusOr<DeviceActivity> soon = reader_->Read();
  EXPECT_EQ(soon.status().code(), absl::StatusCode::kFailedPrecondition)
      << soon.status();
  std::this_thread::sleep_for(cuda::kGpmMinSampleInterval);
  EXPECT_TRUE(reader_->Read().ok());
}

TEST_F(GpmReaderGpuTest, CopyLoopIsDramBound) {
  const double peak = backend_->device().theoretical_bandwidth;
  ASSERT_GT(peak, 0);
  // Starts the interval just before the copies.
  std::this_thread::sleep_for(cuda::kGpmMinSampleInterval);
  ASSERT_TRUE(reader_->Read().ok());
  BenchmarkOptions opts;
  opts.warmup = 1;
  opts.reps = 100;
  opts.min_footprint_bytes = 2 * kCopyBytes;
  const auto start = std::chrono::steady_clock::now();
  int calls = 0;
  double best_copy = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) {
    absl::StatusOr<BenchmarkResult> r =
        backend_->BenchmarkCopy(kCopyBytes, opts);
    ASSERT_TRUE(r.ok()) << r.status();
    const double copy = 2.0 * kCopyBytes / r->back_to_back_seconds;
    if (copy > best_copy) best_copy = copy;
    ++calls;
  }
  absl::StatusOr<DeviceActivity> a = reader_->Read();
  ASSERT_TRUE(a.ok()) << a.status();
  std::printf(
      "copy loop (%d BenchmarkCopy calls, best %.3g B/s): SM occupancy %.3f, "
      "DRAM %.3g B/s = %.1f%% of the %.3g B/s peak, over %.3f s\n",
      calls, best_copy, a->sm_occupancy, a->dram_bytes_per_second,
      100 * a->dram_bytes_per_second / peak, peak, a->interval_seconds);
  EXPECT_GT(a->sm_occupancy, 0);
  EXPECT_LE(a->sm_occupancy, 1);
  EXPECT_GT(a->dram_bytes_per_second, 0.3 * peak);
  EXPECT_LE(a->dram_bytes_per_second, peak);
}

}  // namespace
}  // namespace coalesce
