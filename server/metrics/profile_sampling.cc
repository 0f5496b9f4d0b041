#include "server/metrics/profile_sampling.h"

#include "absl/strings/str_cat.h"

namespace coalesce {

bool ParseProfileSampling(absl::string_view text, ProfileSampling* out) {
  if (text == "off") {
    *out = ProfileSampling::kOff;
    return true;
  }
  if (text == "sampled") {
    *out = ProfileSampling::kSampled;
    return true;
  }
  return false;
}

absl::Status ValidateProfileSamplingFraction(double fraction) {
  if (fraction > 0 && fraction <= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--profile_sampling_fraction must be in (0, 1], not ", fraction));
}

ProfileSamplingStart StartProfileSampling(Backend& backend, double fraction) {
  ProfileSamplingStart start;
  const absl::StatusOr<int64_t> interval =
      backend.EnableProfileSampling(fraction);
  if (!interval.ok()) {
    start.message =
        absl::StrCat("sampling is unavailable (", interval.status().ToString(),
                     "); serving without device-sampled counters");
    return start;
  }
  start.enabled = true;
  start.message =
      absl::StrCat("sampling 1 in ", *interval,
                   " launches (--profile_sampling_fraction=", fraction, ")");
  return start;
}

}  // namespace coalesce
