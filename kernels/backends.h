// Backend construction from the --device flag: "cpu", "cuda" or "auto"
// (CUDA when a device is visible, else CPU). Thread-compatible.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/core/backend.h"

namespace coalesce {

struct BackendOptions {
  std::string device = "auto";  // auto | cpu | cuda
  int threads = 0;              // CPU threads; 0 = all cores
  int cuda_device = 0;
  // CUDA: requests in flight on the device, each on a stream with its own
  // pinned staging; 0: the backend's default (kDefaultCudaLanes).
  int cuda_lanes = 0;
};

struct BackendChoice {
  std::unique_ptr<Backend> backend;
  std::string reason;  // why this backend
};

absl::StatusOr<BackendChoice> CreateBackend(const BackendOptions& opts);

// True when this build contains the CUDA backend.
bool CudaBackendBuilt();

}  // namespace coalesce
