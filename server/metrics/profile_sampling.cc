#include "server/metrics/profile_sampling.h"

#include <utility>

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
  if (text == "gpm") {
    *out = ProfileSampling::kGpm;
    return true;
  }
  return false;
}

absl::Status ValidateProfileSamplingFraction(double fraction) {
  if (fraction > 0 && fraction <= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--profile_sampling_fraction must be in (0, 1], not ", fraction));
}

namespace {

constexpr char kGpmServes[] =
    "reading the whole device's SM occupancy and DRAM bandwidth from NVML "
    "GPM every second (coalesce_device_sm_occupancy_ratio, "
    "coalesce_device_dram_bytes_per_second)";

// Opens a device-level reader per device into start->device_activity, or
// says why one cannot be (and opens none).
absl::Status OpenDeviceActivity(const Backend& backend,
                                ProfileSamplingStart* start) {
  std::vector<std::unique_ptr<DeviceActivityReader>> readers;
  for (int i = 0; i < backend.device_count(); ++i) {
    absl::StatusOr<std::unique_ptr<DeviceActivityReader>> reader =
        backend.OpenDeviceActivityReader(i);
    if (!reader.ok()) {
      if (backend.device_count() == 1) return reader.status();
      return absl::Status(reader.status().code(),
                          absl::StrCat("device ", backend.device_at(i).ordinal,
                                       ": ", reader.status().message()));
    }
    readers.push_back(*std::move(reader));
  }
  start->device_activity = std::move(readers);
  return absl::OkStatus();
}

}  // namespace

ProfileSamplingStart StartProfileSampling(Backend& backend,
                                          ProfileSampling mode,
                                          double fraction) {
  ProfileSamplingStart start;
  if (mode == ProfileSampling::kOff) return start;
  if (mode == ProfileSampling::kGpm) {
    const absl::Status opened = OpenDeviceActivity(backend, &start);
    if (opened.ok()) {
      start.message = kGpmServes;
    } else {
      start.degraded = true;
      start.message =
          absl::StrCat("NVML GPM is unavailable (", opened.ToString(),
                       "); serving without device counters");
    }
    return start;
  }
  const absl::StatusOr<int64_t> interval =
      backend.EnableProfileSampling(fraction);
  if (interval.ok()) {
    start.enabled = true;
    start.message =
        absl::StrCat("sampling 1 in ", *interval,
                     " launches (--profile_sampling_fraction=", fraction, ")");
    return start;
  }
  start.degraded = true;
  if (interval.status().code() != absl::StatusCode::kUnavailable) {
    start.message =
        absl::StrCat("sampling is unavailable (", interval.status().ToString(),
                     "); serving without device-sampled counters");
    return start;
  }
  // CUPTI's profiler is held by another profiler (DCGM's profiling metrics
  // hold the GPU's profiling lock): the device-level counters instead.
  const absl::Status opened = OpenDeviceActivity(backend, &start);
  start.message = absl::StrCat(
      "CUPTI's profiler is held by another profiler (",
      interval.status().ToString(), "); falling back to NVML GPM: ",
      opened.ok() ? std::string(kGpmServes)
                  : absl::StrCat("unavailable too (", opened.ToString(),
                                 "); serving without device counters"));
  return start;
}

}  // namespace coalesce
