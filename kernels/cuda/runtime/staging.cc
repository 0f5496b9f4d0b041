#include "kernels/cuda/runtime/staging.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/runtime/cuda_check.h"

namespace coalesce::cuda {

// The memcpy into one chunk overlaps the DMA of the other.
absl::Status StageIn(Lane& l, void* dst, const void* src, size_t n) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (size_t off = 0, i = 0; off < n; off += kStagingChunkBytes, ++i) {
    const size_t len = std::min(kStagingChunkBytes, n - off);
    const int b = static_cast<int>(i & 1);
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(l.staging_free[b]));
    std::memcpy(l.staging[b], s + off, len);
    COALESCE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        d + off, l.staging[b], len, cudaMemcpyHostToDevice, l.stream));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.staging_free[b], l.stream));
  }
  return absl::OkStatus();
}

// The DMA of chunk i overlaps the memcpy out of chunk i-1.
absl::Status StageOut(Lane& l, void* dst, const void* src, size_t n) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  size_t prev_off = 0, prev_len = 0;
  int prev_b = -1;
  for (size_t off = 0, i = 0; off < n; off += kStagingChunkBytes, ++i) {
    const size_t len = std::min(kStagingChunkBytes, n - off);
    const int b = static_cast<int>(i & 1);
    COALESCE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        l.staging[b], s + off, len, cudaMemcpyDeviceToHost, l.stream));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.staging_free[b], l.stream));
    if (prev_b >= 0) {
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventSynchronize(l.staging_free[prev_b]));
      std::memcpy(d + prev_off, l.staging[prev_b], prev_len);
    }
    prev_off = off;
    prev_len = len;
    prev_b = b;
  }
  if (prev_b >= 0) {
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(l.staging_free[prev_b]));
    std::memcpy(d + prev_off, l.staging[prev_b], prev_len);
  }
  return absl::OkStatus();
}

}  // namespace coalesce::cuda
