// The whole device's SM occupancy and DRAM throughput from NVML's GPU
// Performance Monitoring (GPM, Hopper and newer): two samples of the
// device's counters some interval apart, turned into metrics by the driver.
// Unlike the CUPTI range profiler (cupti_sampler.h), GPM does not take the
// per-GPU profiling lock that DCGM's profiling metrics and Nsight hold, so
// it serves where --profile_sampling=sampled cannot; it sees every process
// on the device, not one request's kernels.
//
// NVML (libnvidia-ml.so.1) ships with the driver, not the toolkit, and there
// is no NVML header here: it is loaded with dlopen on first use, like CUPTI
// and cuBLASLt (runtime/dynamic_library.h), and only the entry points,
// structs and ids used are declared in gpm_reader.cc, from nvml.h. A machine
// without the driver still serves; Create says why it cannot read GPM.
//
// Thread-safety: GpmReader is thread-safe (Read serializes on a mutex); the
// free functions are pure.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/core/device_activity.h"

namespace coalesce::cuda {

// The least time between the two samples of a GPM metric: NVML's reference
// for nvmlGpmMetricsGet notes that the interval between the two
// nvmlGpmSampleGet calls should exceed 100 ms
// (https://docs.nvidia.com/deploy/nvml-api/group__nvmlGpmFunctions.html).
inline constexpr std::chrono::milliseconds kGpmMinSampleInterval{100};

// What nvmlGpmMetricsGet returns for the two metrics read, as NVML gives
// them: percents, 0..100.
struct GpmPercents {
  // NVML_GPM_METRIC_SM_OCCUPANCY: warps active over the theoretical
  // maximum.
  double sm_occupancy = 0;
  // NVML_GPM_METRIC_DRAM_BW_UTIL: DRAM bandwidth used over the theoretical
  // maximum.
  double dram_bw_util = 0;
};

// The activity GPM percents describe over `seconds`: sm_occupancy is the
// percent over 100; dram_bytes_per_second is DRAM_BW_UTIL / 100 times
// peak_bandwidth, the device's theoretical DRAM bandwidth in bytes/s
// (DeviceInfo::theoretical_bandwidth: 2 transfers per memory clock times the
// bus width, from cudaDeviceProp; GPM's percent is of the same theoretical
// maximum). Percents a little outside 0..100 (counter rounding) are clamped.
// INVALID_ARGUMENT when a percent is not finite, or peak_bandwidth or
// seconds is not > 0.
absl::StatusOr<DeviceActivity> ActivityFromGpm(const GpmPercents& percents,
                                               double peak_bandwidth,
                                               double seconds);

// An nvmlReturn_t as a Status naming the call and NVML's text (`text` from
// nvmlErrorString; may be null): UNIMPLEMENTED where this machine or GPU
// offers no GPM (not supported, driver not loaded, old NVML lacking a
// function or struct version), PERMISSION_DENIED, NOT_FOUND (no GPU with
// that UUID), UNAVAILABLE (GPU lost, in use, not ready, timeout),
// RESOURCE_EXHAUSTED (host memory), INTERNAL otherwise.
absl::Status NvmlStatus(int result, absl::string_view call, const char* text);

class GpmReader final : public DeviceActivityReader {
 public:
  // Loads NVML, initializes it, finds the GPU whose UUID is `uuid` ("GPU-"
  // and 32 hex digits, as DeviceInfo::uuid and nvidia-smi print it), checks
  // that it supports GPM, and takes the first sample. peak_bandwidth: the
  // device's theoretical DRAM bandwidth in bytes/s (ActivityFromGpm).
  // Errors: UNIMPLEMENTED (libnvidia-ml.so.1 not found, GPM unsupported on
  // this GPU or under MIG), INVALID_ARGUMENT (bad uuid or peak), and
  // NvmlStatus's codes naming the call.
  static absl::StatusOr<std::unique_ptr<GpmReader>> Create(
      const std::string& uuid, double peak_bandwidth);
  ~GpmReader() override;
  GpmReader(const GpmReader&) = delete;
  GpmReader& operator=(const GpmReader&) = delete;

  // DeviceActivityReader: a new sample, and the activity between the
  // previous one and it. FAILED_PRECONDITION, the previous sample kept,
  // when it was taken less than kGpmMinSampleInterval ago.
  absl::StatusOr<DeviceActivity> Read() override;

 private:
  struct State;  // NVML's handles, opaque here
  GpmReader() = default;

  double peak_bandwidth_ = 0;
  absl::Mutex mu_;
  std::unique_ptr<State> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace coalesce::cuda
