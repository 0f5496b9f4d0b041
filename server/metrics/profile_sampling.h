// --profile_sampling=off|sampled and --profile_sampling_fraction: whether
// the backend samples device counters (achieved occupancy, DRAM throughput)
// of a fraction of kernel launches, and turning that on at start-up. The
// CUDA backend brackets every Nth launch with the CUPTI range profiler
// (kernels/cuda/profiling/cupti_sampler.h) and returns the counters in
// RunResult, which the metrics export; where sampling is unavailable (CPU
// backend, no CUPTI, counters restricted to administrators) the start-up log
// says why and everything else runs unaffected. Pure functions apart from
// StartProfileSampling, which calls the backend once; thread-compatible.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/core/backend.h"

namespace coalesce {

enum class ProfileSampling { kOff, kSampled };

// "off" or "sampled"; false for anything else.
bool ParseProfileSampling(absl::string_view text, ProfileSampling* out);

// --profile_sampling_fraction's default: one launch in a hundred, so that
// the profiler's serialization of a sampled request stays a percent of the
// traffic.
inline constexpr double kDefaultProfileSamplingFraction = 0.01;

// OK for 0 < fraction <= 1; INVALID_ARGUMENT naming the flag otherwise
// (NaN included).
absl::Status ValidateProfileSamplingFraction(double fraction);

// What turning sampling on did, for the start-up log.
struct ProfileSamplingStart {
  bool enabled = false;
  // "sampling 1 in N launches ..." when enabled; otherwise why sampling is
  // unavailable.
  std::string message;
};

// Asks backend to sample `fraction` of its launches (validated already).
ProfileSamplingStart StartProfileSampling(Backend& backend, double fraction);

}  // namespace coalesce
