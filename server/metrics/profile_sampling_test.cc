// --profile_sampling and --profile_sampling_fraction: parsing, validation,
// and what start-up logs for a backend that can sample and for ones that
// cannot.
#include "server/metrics/profile_sampling.h"

#include <cmath>
#include <limits>
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;

TEST(ParseProfileSamplingTest, AcceptsOffAndSampledOnly) {
  ProfileSampling mode = ProfileSampling::kSampled;
  ASSERT_TRUE(ParseProfileSampling("off", &mode));
  EXPECT_EQ(mode, ProfileSampling::kOff);
  ASSERT_TRUE(ParseProfileSampling("sampled", &mode));
  EXPECT_EQ(mode, ProfileSampling::kSampled);
  for (const char* bad : {"", "on", "always", "Sampled", "sampled "}) {
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

// The CPU backend with EnableProfileSampling answering what a CUDA backend
// would.
class SamplingBackend final : public Backend {
 public:
  explicit SamplingBackend(absl::StatusOr<int64_t> answer)
      : cpu_(CreateCpuBackend(1)), answer_(std::move(answer)) {}
  BackendKind kind() const override { return BackendKind::kCuda; }
  const DeviceInfo& device() const override { return cpu_->device(); }
  const VariantRegistry& registry() const override { return cpu_->registry(); }
  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& host, RunResult* result) override {
    return cpu_->Execute(v, p, host, result);
  }
  absl::StatusOr<int64_t> EnableProfileSampling(double fraction) override {
    fraction_ = fraction;
    return answer_;
  }
  double fraction_ = 0;

 private:
  std::unique_ptr<Backend> cpu_;
  absl::StatusOr<int64_t> answer_;
};

TEST(StartProfileSamplingTest, SaysOneInN) {
  SamplingBackend backend(100);
  const ProfileSamplingStart start = StartProfileSampling(backend, 0.01);
  EXPECT_TRUE(start.enabled);
  EXPECT_EQ(backend.fraction_, 0.01);
  EXPECT_EQ(start.message,
            "sampling 1 in 100 launches (--profile_sampling_fraction=0.01)");
}

TEST(StartProfileSamplingTest, SaysWhyTheBackendCannot) {
  SamplingBackend backend(absl::PermissionDeniedError(
      "cuptiRangeProfilerEnable: insufficient privileges"));
  const ProfileSamplingStart start = StartProfileSampling(backend, 1);
  EXPECT_FALSE(start.enabled);
  EXPECT_THAT(start.message,
              HasSubstr("unavailable (PERMISSION_DENIED: "
                        "cuptiRangeProfilerEnable: insufficient privileges)"));
  EXPECT_THAT(start.message,
              HasSubstr("serving without device-sampled counters"));
}

TEST(StartProfileSamplingTest, TheCpuBackendHasNoCounters) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend(1);
  const ProfileSamplingStart start = StartProfileSampling(*cpu, 0.5);
  EXPECT_FALSE(start.enabled);
  EXPECT_THAT(start.message,
              HasSubstr("UNIMPLEMENTED: the cpu backend has no device "
                        "counters to sample"));
}

}  // namespace
}  // namespace coalesce
