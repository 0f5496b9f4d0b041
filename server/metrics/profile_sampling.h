// --profile_sampling=off|sampled|gpm and --profile_sampling_fraction:
// whether the backend reads device counters, and turning that on at
// start-up.
//
// sampled: the backend samples device counters (achieved occupancy, DRAM
// throughput) of a fraction of kernel launches. The CUDA backend brackets
// every Nth launch with the CUPTI range profiler
// (kernels/cuda/profiling/cupti_sampler.h) and returns the counters in
// RunResult, which the metrics export. Where another profiler holds the
// device's counters (DCGM's profiling metrics take the per-GPU profiling
// lock that CUPTI's profiler needs), it falls back to gpm.
//
// gpm: the whole device's SM occupancy and DRAM throughput, read every
// second from counters no profiler locks (NVML GPM on the CUDA backend:
// kernels/cuda/profiling/gpm_reader.h; Backend::OpenDeviceActivityReader)
// and exported as device gauges (device_activity_metrics.h).
//
// Where neither is available (CPU backend, no CUPTI or NVML, counters
// restricted to administrators) the start-up log says why and everything
// else runs unaffected. Pure functions apart from StartProfileSampling,
// which calls the backend; thread-compatible.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/core/backend.h"

namespace coalesce {

enum class ProfileSampling { kOff, kSampled, kGpm };

// "off", "sampled" or "gpm"; false for anything else.
bool ParseProfileSampling(absl::string_view text, ProfileSampling* out);

// --profile_sampling_fraction's default: one launch in a hundred, so that
// the profiler's serialization of a sampled request stays a percent of the
// traffic.
inline constexpr double kDefaultProfileSamplingFraction = 0.01;

// OK for 0 < fraction <= 1; INVALID_ARGUMENT naming the flag otherwise
// (NaN included).
absl::Status ValidateProfileSamplingFraction(double fraction);

// What turning sampling on did, for the start-up log: one line.
struct ProfileSamplingStart {
  // Per-launch sampling (CUPTI) is on.
  bool enabled = false;
  // Device-level counters to poll (NVML GPM), one reader per device by
  // index: asked for with gpm, or the fallback of sampled; empty when off
  // or unavailable on any device.
  std::vector<std::unique_ptr<DeviceActivityReader>> device_activity;
  // Something asked for is unavailable or replaced: log as a warning.
  bool degraded = false;
  // What is on, or why it is not: "sampling 1 in N launches ...", or why
  // sampling is unavailable, and what serves instead.
  std::string message;
};

// Turns on what `mode` asks (kOff: nothing): for kSampled, asks backend to
// sample `fraction` of its launches (validated already), and opens the
// device-level reader instead when the backend answers UNAVAILABLE
// (another profiler holds the counters); for kGpm, opens the device-level
// reader.
ProfileSamplingStart StartProfileSampling(Backend& backend,
                                          ProfileSampling mode,
                                          double fraction);

}  // namespace coalesce
