// How busy the whole device was over an interval, read from counters the
// device keeps for every process on it (NVML GPM on the CUDA backend:
// kernels/cuda/profiling/gpm_reader.h), as opposed to the per-launch
// counters of RunResult. Backend::OpenDeviceActivityReader opens a reader.
#pragma once

#include "absl/status/statusor.h"

namespace coalesce {

// The device between two samples of its counters.
struct DeviceActivity {
  // 0..1: warps resident per cycle over the SMs' maximum, averaged over the
  // SMs and the interval (idle SMs count as 0).
  double sm_occupancy = 0;
  // DRAM bytes read and written per second over the interval.
  double dram_bytes_per_second = 0;
  // Wall time between the two samples.
  double interval_seconds = 0;
};

// Samples a device's counters; each Read covers the time since the previous
// sample. Thread-safe (Reads are serialized).
class DeviceActivityReader {
 public:
  virtual ~DeviceActivityReader() = default;
  // Takes a sample and returns the activity since the previous one (the
  // first Read: since the reader was opened). The samples must be some
  // interval apart (100 ms for NVML GPM): a Read sooner than that fails
  // with FAILED_PRECONDITION and keeps the previous sample.
  virtual absl::StatusOr<DeviceActivity> Read() = 0;
};

}  // namespace coalesce
