// Many device-to-device copies in one kernel launch: a stacked run's
// gather of resident inputs into merged buffers and scatter of merged
// outputs, whose pieces would otherwise cost a cudaMemcpyAsync each (a few
// microseconds of driver time per piece, and one DMA per piece on the copy
// engine the lanes' staging copies share). Thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace coalesce::cuda {

// bytes from src to dst, both device memory. The segments of one call run
// at once: no destination may overlap another segment's source or
// destination.
struct CopySegment {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t bytes = 0;
};

// Segments one launch copies: the table travels by value as the kernel's
// parameter (under the 4 KB parameter limit), so a launch needs no upload.
// 128 covers a batch of 64 requests with two stacked operands.
inline constexpr int kBatchCopySegmentsPerLaunch = 128;

// Enqueues the copies on stream: ceil(n / kBatchCopySegmentsPerLaunch)
// launches for the n segments of nonzero size, none when there are none.
// Each segment moves in 16-byte vectors where src and dst are both 16-byte
// aligned, else in the widest words of 8, 4, 2 or 1 bytes their alignment
// allows; a tail shorter than a word goes byte by byte.
// INVALID_ARGUMENT for a negative size or a null pointer with bytes > 0;
// launch errors are returned; nothing is synchronized.
absl::Status BatchCopy(absl::Span<const CopySegment> segments,
                       cudaStream_t stream);

}  // namespace coalesce::cuda
