// Backend construction from the --device flag: "cpu", "cuda" or "auto"
// (CUDA when a device is visible, else CPU). Thread-compatible.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/core/backend.h"

namespace coalesce {

struct BackendOptions {
  std::string device = "auto";  // auto | cpu | cuda
  int threads = 0;              // CPU threads; 0 = all cores
  // The devices to serve: "all", or ordinals separated by commas ("0,2").
  // More than one makes a DeviceGroup.
  std::string devices = "all";
  // The CPU backend: this many simulated devices (CreateSimulatedCpuDevice)
  // instead of one CPU backend; 1: the plain CPU backend.
  int cpu_devices = 1;
  // CUDA: requests in flight on the device, each on a stream with its own
  // pinned staging; 0: the backend's default (kDefaultCudaLanes).
  int cuda_lanes = 0;
  // CUDA: calls on stored operands that repeat (the same variant, problem
  // and operand addresses) replay a CUDA graph (LaunchGraphs).
  bool cuda_launch_graphs = false;
};

struct BackendChoice {
  std::unique_ptr<Backend> backend;
  std::string reason;  // why this backend
};

absl::StatusOr<BackendChoice> CreateBackend(const BackendOptions& opts);

// The ordinals --devices names among `count` devices, in increasing order:
// INVALID_ARGUMENT naming the flag for a malformed list, a repeated
// ordinal, one out of range, or no device at all.
absl::StatusOr<std::vector<int>> ParseDevices(absl::string_view devices,
                                              int count);

// True when this build contains the CUDA backend.
bool CudaBackendBuilt();

}  // namespace coalesce
