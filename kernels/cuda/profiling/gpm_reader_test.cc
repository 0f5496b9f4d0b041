// NVML GPM's values turned into device activity, and NVML's return codes
// into Status codes. Pure host code; runs without a GPU or NVML.
#include "kernels/cuda/profiling/gpm_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace coalesce::cuda {
namespace {

using ::testing::HasSubstr;

constexpr double kPeak = 4.8e12;  // bytes/s

TEST(ActivityFromGpmTest, PercentsBecomeFractionAndBytesPerSecond) {
  absl::StatusOr<DeviceActivity> a = ActivityFromGpm({62.5, 85}, kPeak, 1.0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_DOUBLE_EQ(a->sm_occupancy, 0.625);
  EXPECT_DOUBLE_EQ(a->dram_bytes_per_second, 0.85 * kPeak);
  EXPECT_DOUBLE_EQ(a->interval_seconds, 1.0);
}

TEST(ActivityFromGpmTest, IdleDeviceReadsZero) {
  absl::StatusOr<DeviceActivity> a = ActivityFromGpm({}, kPeak, 0.25);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->sm_occupancy, 0);
  EXPECT_EQ(a->dram_bytes_per_second, 0);
}

TEST(ActivityFromGpmTest, ClampsRoundingOutsideZeroToHundred) {
  absl::StatusOr<DeviceActivity> a =
      ActivityFromGpm({100.4, -0.01}, kPeak, 1.0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->sm_occupancy, 1.0);
  EXPECT_EQ(a->dram_bytes_per_second, 0);
}

TEST(ActivityFromGpmTest, RefusesWhatCannotBeRight) {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  for (const GpmPercents& p :
       {GpmPercents{nan, 10}, GpmPercents{10, nan}, GpmPercents{inf, 10}}) {
    EXPECT_EQ(ActivityFromGpm(p, kPeak, 1).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  for (double peak : {0.0, -1.0, nan, inf}) {
    EXPECT_EQ(ActivityFromGpm({50, 50}, peak, 1).status().code(),
              absl::StatusCode::kInvalidArgument)
        << peak;
  }
  for (double seconds : {0.0, -1.0, nan}) {
    EXPECT_EQ(ActivityFromGpm({50, 50}, kPeak, seconds).status().code(),
              absl::StatusCode::kInvalidArgument)
        << seconds;
  }
}

TEST(NvmlStatusTest, SuccessIsOk) {
  EXPECT_TRUE(NvmlStatus(0, "nvmlInit_v2", nullptr).ok());
}

TEST(NvmlStatusTest, NamesTheCallTheTextAndTheCode) {
  const absl::Status s = NvmlStatus(3, "nvmlGpmSampleGet", "Not Supported");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "nvmlGpmSampleGet: Not Supported (nvmlReturn_t 3)");
  EXPECT_THAT(NvmlStatus(42, "nvmlInit_v2", nullptr).message(),
              HasSubstr("unknown NVML error"));
}

TEST(NvmlStatusTest, CodesByCause) {
  struct Case {
    int result;
    absl::StatusCode code;
  };
  for (const Case& c : {
           Case{3, absl::StatusCode::kUnimplemented},   // NOT_SUPPORTED
           Case{9, absl::StatusCode::kUnimplemented},   // DRIVER_NOT_LOADED
           Case{12, absl::StatusCode::kUnimplemented},  // LIBRARY_NOT_FOUND
           Case{13, absl::StatusCode::kUnimplemented},  // FUNCTION_NOT_FOUND
           Case{25, absl::StatusCode::kUnimplemented},  // ARGUMENT_VERSION_...
           Case{4, absl::StatusCode::kPermissionDenied},
           Case{6, absl::StatusCode::kNotFound},
           Case{28, absl::StatusCode::kNotFound},     // GPU_NOT_FOUND
           Case{15, absl::StatusCode::kUnavailable},  // GPU_IS_LOST
           Case{19, absl::StatusCode::kUnavailable},  // IN_USE
           Case{20, absl::StatusCode::kResourceExhausted},
           Case{2, absl::StatusCode::kInternal},  // INVALID_ARGUMENT: ours
           Case{999, absl::StatusCode::kInternal},
       }) {
    EXPECT_EQ(NvmlStatus(c.result, "call", "text").code(), c.code) << c.result;
  }
}

TEST(GpmReaderTest, RefusesWhatIsNotAWholeGpu) {
  absl::StatusOr<std::unique_ptr<GpmReader>> mig =
      GpmReader::Create("MIG-0e2a4c6d-1111-2222-3333-444455556666", kPeak);
  EXPECT_EQ(mig.status().code(), absl::StatusCode::kUnimplemented);
  absl::StatusOr<std::unique_ptr<GpmReader>> bad =
      GpmReader::Create("0", kPeak);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<GpmReader>> no_peak =
      GpmReader::Create("GPU-0e2a4c6d-1111-2222-3333-444455556666", 0);
  EXPECT_EQ(no_peak.status().code(), absl::StatusCode::kInvalidArgument);
}

// Without a driver (CI, this machine) Create says NVML is unavailable; with
// one, an unknown UUID is not found. Either way it fails with a reason.
TEST(GpmReaderTest, UnknownGpuFailsWithAReason) {
  absl::StatusOr<std::unique_ptr<GpmReader>> r =
      GpmReader::Create("GPU-00000000-0000-0000-0000-000000000000", kPeak);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.status().message().empty());
}

}  // namespace
}  // namespace coalesce::cuda
