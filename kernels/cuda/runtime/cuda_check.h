// CUDA error -> absl::Status, for host code of the CUDA backend. Out of
// memory maps to RESOURCE_EXHAUSTED (the request may fit later), every other
// CUDA error to INTERNAL with the expression and file:line. Thread-safe.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace coalesce::cuda {

inline absl::Status CudaStatus(cudaError_t err, const char* expr,
                               const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  // Reset the per-thread last-error state, so a later launch check does not
  // report this error again (sticky errors persist regardless).
  cudaGetLastError();
  std::string msg =
      absl::StrCat(expr, ": ", cudaGetErrorName(err), " (",
                   cudaGetErrorString(err), ") at ", file, ":", line);
  if (err == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(std::move(msg));
  }
  return absl::InternalError(std::move(msg));
}

}  // namespace coalesce::cuda

#define COALESCE_CUDA_RETURN_IF_ERROR(expr)                              \
  do {                                                                   \
    ::absl::Status _coalesce_cuda_status =                               \
        ::coalesce::cuda::CudaStatus((expr), #expr, __FILE__, __LINE__); \
    if (!_coalesce_cuda_status.ok()) return _coalesce_cuda_status;       \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR() \
  COALESCE_CUDA_RETURN_IF_ERROR(cudaGetLastError())
