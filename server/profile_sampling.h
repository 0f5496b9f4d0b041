// --profile_sampling=off|sampled: whether to sample device counters (achieved
// occupancy, DRAM throughput) of a fraction of kernel launches with CUPTI, the
// counters Nsight Compute reads. No backend implements the sampling yet: the
// CUPTI range profiler has to bracket the launch inside the CUDA backend's
// Execute and return its counters in RunResult (docs/METRICS.md, "Device-
// sampled counters"). Until then ProfileSamplingSupport says why sampling is
// unavailable, main logs it at start-up, and everything else is unaffected.
// Pure functions; thread-safe.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/core/backend.h"

namespace coalesce {

enum class ProfileSampling { kOff, kSampled };

// "off" or "sampled"; false for anything else.
bool ParseProfileSampling(absl::string_view text, ProfileSampling* out);

// OK when backend can sample device counters; otherwise UNIMPLEMENTED saying
// why not.
absl::Status ProfileSamplingSupport(const Backend& backend);

}  // namespace coalesce
