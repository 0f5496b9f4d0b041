#include "server/profile_sampling.h"

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

absl::Status ProfileSamplingSupport(const Backend& backend) {
  if (backend.kind() == BackendKind::kCpu) {
    return absl::UnimplementedError(
        "the CPU backend has no device counters to sample");
  }
  return absl::UnimplementedError(
      "CUPTI range profiling is not integrated into the CUDA backend yet: "
      "kernels report no sampled counters (docs/METRICS.md, \"Device-sampled "
      "counters\")");
}

}  // namespace coalesce
