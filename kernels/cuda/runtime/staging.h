// Copies between host memory and device memory through a lane's two pinned
// staging buffers (kStagingChunkBytes each), chunk by chunk: the host
// memcpy of one chunk overlaps the DMA of the other, so pageable request
// bytes move at close to pinned speed without pinning them. Used for a
// call's host operands and for the copies to and from resident memory.
// Thread-safety: one call per lane at a time (the lane's holder).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/cuda/runtime/lane_pool.h"

namespace coalesce::cuda {

// Host src -> device dst, n bytes, queued on the lane's stream. Returns
// once the last chunk is in a staging buffer: src may be reused, and the
// copy completes in stream order. A staging buffer is reused only after its
// previous copy (staging_free), so a later StageIn on the lane is safe.
absl::Status StageIn(Lane& l, void* dst, const void* src, size_t n);

// Device src -> host dst, n bytes, in the lane's stream order (after the
// work queued on it); returns once every byte is in dst.
absl::Status StageOut(Lane& l, void* dst, const void* src, size_t n);

}  // namespace coalesce::cuda
