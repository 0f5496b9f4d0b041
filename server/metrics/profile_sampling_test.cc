// --profile_sampling and --profile_sampling_fraction: parsing, validation,
// and what start-up turns on and logs for a backend that can sample, one
// whose profiler another holds (the NVML GPM fallback) and ones that cannot.
#include "server/metrics/profile_sampling.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;

TEST(ParseProfileSamplingTest, AcceptsOffSampledAndGpmOnly) {
  ProfileSampling mode = ProfileSampling::kSampled;
  ASSERT_TRUE(ParseProfileSampling("off", &mode));
  EXPECT_EQ(mode, ProfileSampling::kOff);
  ASSERT_TRUE(ParseProfileSampling("sampled", &mode));
  EXPECT_EQ(mode, ProfileSampling::kSampled);
  ASSERT_TRUE(ParseProfileSampling("gpm", &mode));
  EXPECT_EQ(mode, ProfileSampling::kGpm);
  for (const char* bad :
       {"", "on", "always", "Sampled", "sampled ", "GPM", "nvml"}) {
    EXPECT_FALSE(ParseProfileSampling(bad, &mode)) << bad;
  }
}

TEST(ValidateProfileSamplingFractionTest, AcceptsZeroToOneExcludingZero) {
  for (double f : {kDefaultProfileSamplingFraction, 1e-9, 0.5, 1.0}) {
    EXPECT_TRUE(ValidateProfileSamplingFraction(f).ok()) << f;
  }
  for (double f : {0.0, -0.01, 1.0000001, 2.0, std::nan(""),
                   std::numeric_limits<double>::infinity()}) {
    const absl::Status s = ValidateProfileSamplingFraction(f);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << f;
    EXPECT_THAT(s.message(), HasSubstr("--profile_sampling_fraction")) << f;
  }
}

// A device-level reader that reads nothing: only whether it was opened
// matters here.
class NullReader final : public DeviceActivityReader {
 public:
  absl::StatusOr<DeviceActivity> Read() override { return DeviceActivity{}; }
};

// The CPU backend with EnableProfileSampling and OpenDeviceActivityReader
// answering what a CUDA backend would.
class SamplingBackend final : public Backend {
 public:
  explicit SamplingBackend(absl::StatusOr<int64_t> answer,
                           absl::Status gpm = absl::OkStatus())
      : cpu_(CreateCpuBackend(1)),
        answer_(std::move(answer)),
        gpm_(std::move(gpm)) {}
  BackendKind kind() const override { return BackendKind::kCuda; }
  const DeviceInfo& device() const override { return cpu_->device(); }
  const VariantRegistry& registry() const override { return cpu_->registry(); }
  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& host, RunResult* result) override {
    return cpu_->Execute(v, p, host, result);
  }
  absl::StatusOr<int64_t> EnableProfileSampling(double fraction) override {
    fraction_ = fraction;
    ++enable_calls_;
    return answer_;
  }
  int device_count() const override { return devices_; }
  const DeviceInfo& device_at(int /*i*/) const override { return device(); }
  absl::StatusOr<std::unique_ptr<DeviceActivityReader>>
  OpenDeviceActivityReader(int device) const override {
    ++open_calls_;
    if (!gpm_.ok() && device == failing_device_) return gpm_;
    return std::unique_ptr<DeviceActivityReader>(new NullReader());
  }
  double fraction_ = 0;
  int enable_calls_ = 0;
  mutable int open_calls_ = 0;
  int devices_ = 1;
  int failing_device_ = 0;  // the device whose reader fails (with gpm)

 private:
  std::unique_ptr<Backend> cpu_;
  absl::StatusOr<int64_t> answer_;
  absl::Status gpm_;
};

// What DCGM's profiling metrics make CUPTI answer (cupti_sampler.cc).
absl::Status ProfilerHeld() {
  return absl::UnavailableError(
      "cuptiRangeProfilerEnable: CUPTI_ERROR_HARDWARE_BUSY (CUptiResult 26); "
      "another profiler (DCGM profiling, Nsight Compute or Systems) holds "
      "the device's counters");
}

TEST(StartProfileSamplingTest, OffTurnsOnNothing) {
  SamplingBackend backend(100);
  const ProfileSamplingStart start =
      StartProfileSampling(backend, ProfileSampling::kOff, 0.01);
  EXPECT_FALSE(start.enabled);
  EXPECT_TRUE(start.device_activity.empty());
  EXPECT_TRUE(start.message.empty());
  EXPECT_EQ(backend.enable_calls_, 0);
  EXPECT_EQ(backend.open_calls_, 0);
}

TEST(StartProfileSamplingTest, SaysOneInN) {
  SamplingBackend backend(100);
  const ProfileSamplingStart start =
      StartProfileSampling(backend, ProfileSampling::kSampled, 0.01);
  EXPECT_TRUE(start.enabled);
  EXPECT_FALSE(start.degraded);
  EXPECT_TRUE(start.device_activity.empty());
  EXPECT_EQ(backend.open_calls_, 0);
  EXPECT_EQ(backend.fraction_, 0.01);
  EXPECT_EQ(start.message,
            "sampling 1 in 100 launches (--profile_sampling_fraction=0.01)");
}

TEST(StartProfileSamplingTest, SaysWhyTheBackendCannot) {
  SamplingBackend backend(absl::PermissionDeniedError(
      "cuptiRangeProfilerEnable: insufficient privileges"));
  const ProfileSamplingStart start =
      StartProfileSampling(backend, ProfileSampling::kSampled, 1);
  EXPECT_FALSE(start.enabled);
  EXPECT_TRUE(start.degraded);
  // Only a profiler held elsewhere falls back to GPM.
  EXPECT_TRUE(start.device_activity.empty());
  EXPECT_EQ(backend.open_calls_, 0);
  EXPECT_THAT(start.message,
              HasSubstr("unavailable (PERMISSION_DENIED: "
                        "cuptiRangeProfilerEnable: insufficient privileges)"));
  EXPECT_THAT(start.message,
              HasSubstr("serving without device-sampled counters"));
}

TEST(StartProfileSamplingTest, TheCpuBackendHasNoCounters) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend(1);
  const ProfileSamplingStart start =
      StartProfileSampling(*cpu, ProfileSampling::kSampled, 0.5);
  EXPECT_FALSE(start.enabled);
  EXPECT_THAT(start.message,
              HasSubstr("UNIMPLEMENTED: the cpu backend has no device "
                        "counters to sample"));
  const ProfileSamplingStart gpm =
      StartProfileSampling(*cpu, ProfileSampling::kGpm, 0.5);
  EXPECT_TRUE(gpm.device_activity.empty());
  EXPECT_TRUE(gpm.degraded);
  EXPECT_THAT(gpm.message,
              HasSubstr("NVML GPM is unavailable (UNIMPLEMENTED: the cpu "
                        "backend has no device-level activity counters)"));
}

TEST(StartProfileSamplingTest, ProfilerHeldElsewhereFallsBackToGpm) {
  SamplingBackend backend(ProfilerHeld());
  const ProfileSamplingStart start =
      StartProfileSampling(backend, ProfileSampling::kSampled, 0.01);
  EXPECT_FALSE(start.enabled);
  EXPECT_TRUE(start.degraded);
  EXPECT_EQ(start.device_activity.size(), 1u);
  EXPECT_THAT(start.message,
              HasSubstr("CUPTI's profiler is held by another profiler "
                        "(UNAVAILABLE: cuptiRangeProfilerEnable: "
                        "CUPTI_ERROR_HARDWARE_BUSY"));
  EXPECT_THAT(start.message,
              HasSubstr("falling back to NVML GPM: reading the whole "
                        "device's SM occupancy and DRAM bandwidth"));
  EXPECT_EQ(start.message.find('\n'), std::string::npos);
}

TEST(StartProfileSamplingTest, FallbackSaysWhenGpmIsUnavailableToo) {
  SamplingBackend backend(ProfilerHeld(),
                          absl::UnimplementedError("GPU-x does not support "
                                                   "NVML GPM"));
  const ProfileSamplingStart start =
      StartProfileSampling(backend, ProfileSampling::kSampled, 0.01);
  EXPECT_TRUE(start.device_activity.empty());
  EXPECT_TRUE(start.degraded);
  EXPECT_THAT(start.message, HasSubstr("falling back to NVML GPM: "
                                       "unavailable too (UNIMPLEMENTED: "
                                       "GPU-x does not support NVML GPM)"));
}

TEST(StartProfileSamplingTest, GpmAsksOnlyForTheDeviceReader) {
  SamplingBackend backend(100);
  const ProfileSamplingStart start =
      StartProfileSampling(backend, ProfileSampling::kGpm, 0.01);
  EXPECT_EQ(backend.enable_calls_, 0);
  EXPECT_FALSE(start.enabled);
  EXPECT_FALSE(start.degraded);
  EXPECT_EQ(start.device_activity.size(), 1u);
  EXPECT_THAT(start.message, HasSubstr("NVML GPM every second"));
}

// Several devices: a reader each, or none with the failing device named.
TEST(StartProfileSamplingTest, GpmOpensAReaderPerDevice) {
  SamplingBackend backend(100);
  backend.devices_ = 3;
  const ProfileSamplingStart start =
      StartProfileSampling(backend, ProfileSampling::kGpm, 0.01);
  EXPECT_FALSE(start.degraded);
  EXPECT_EQ(start.device_activity.size(), 3u);
  EXPECT_EQ(backend.open_calls_, 3);

  SamplingBackend partial(100, absl::PermissionDeniedError("no GPM here"));
  partial.devices_ = 3;
  partial.failing_device_ = 1;
  const ProfileSamplingStart failed =
      StartProfileSampling(partial, ProfileSampling::kGpm, 0.01);
  EXPECT_TRUE(failed.degraded);
  EXPECT_TRUE(failed.device_activity.empty());
  EXPECT_THAT(failed.message, HasSubstr("PERMISSION_DENIED: device "));
  EXPECT_THAT(failed.message, HasSubstr(": no GPM here"));
}

}  // namespace
}  // namespace coalesce
