// The device buffers of one call (a request's staged operands, a
// benchmark's buffer sets): allocated from the stream-ordered pool on the
// call's stream and freed, stream-ordered, on every exit path, so that the
// pool reuses them without a driver call or a synchronization. One call's
// object: not thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/runtime/cuda_check.h"

namespace coalesce::cuda {

struct DeviceBuffers {
  cudaStream_t stream;
  std::vector<void*> ptrs;
  ~DeviceBuffers() {
    for (void* q : ptrs) cudaFreeAsync(q, stream);
  }
  // nullptr for bytes <= 0 (an empty operand).
  absl::StatusOr<void*> Alloc(int64_t bytes) {
    if (bytes <= 0) return nullptr;
    void* q = nullptr;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&q, bytes, stream));
    ptrs.push_back(q);
    return q;
  }
};

}  // namespace coalesce::cuda
