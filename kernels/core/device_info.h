// A description of the device a backend runs on: what selection, reports and
// GetServerInfo need. Plain value; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace coalesce {

enum class BackendKind : int { kCpu = 0, kCuda = 1 };
inline absl::string_view BackendName(BackendKind b) {
  return b == BackendKind::kCpu ? "cpu" : "cuda";
}

struct DeviceInfo {
  BackendKind backend = BackendKind::kCpu;
  std::string name;
  int ordinal = 0;
  // A CPU backend standing in for one of several devices (--cpu_devices):
  // its ordinal is its index among them.
  bool simulated = false;
  // CUDA: the GPU's UUID as nvidia-smi and DCGM print it ("GPU-" and 32 hex
  // digits in 8-4-4-4-12 groups); empty on the CPU.
  std::string uuid;
  // CUDA: the runtime the server was built with ("13.0"); empty on the CPU.
  std::string runtime_version;
  int cc_major = 0;
  int cc_minor = 0;
  int multiprocessors = 0;  // SMs, or CPU threads
  int max_threads_per_multiprocessor = 0;
  int64_t memory_bytes = 0;
  int64_t l2_cache_bytes = 0;
  int64_t shared_memory_per_block_bytes = 0;
  int64_t shared_memory_per_block_optin_bytes = 0;
  double theoretical_bandwidth = 0;    // bytes/s, from clock and bus width
  double measured_copy_bandwidth = 0;  // bytes/s, read + write, timed
  // CUDA: what the pair of events around a request's launches adds to their
  // span, in seconds: an empty kernel's span between them, measured at
  // start-up (MeasureEventOverhead); 0 on the CPU. The device busy ratio
  // subtracts it once per launch.
  double event_overhead_seconds = 0;
  // The same for a call replayed as a CUDA graph (RunResult::graph_replayed):
  // an empty kernel's graph between the two events as its nodes.
  double graph_event_overhead_seconds = 0;
  double peak_fp32_flops = 0;    // FLOP/s estimate for roofline
  double peak_tensor_flops = 0;  // 16-bit tensor-core FLOP/s estimate
};

}  // namespace coalesce
