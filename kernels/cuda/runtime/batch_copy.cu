#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/runtime/batch_copy.h"
#include "kernels/cuda/runtime/cuda_check.h"

namespace coalesce::cuda {
namespace {

constexpr int kThreads = 256;
// Independent loads in flight per thread before its stores: with 16-byte
// vectors, 16 KB per block per pass.
constexpr int kUnroll = 4;
constexpr int64_t kBytesPerBlockPass = int64_t{kThreads} * kUnroll * 16;
// A launch's grid: a few waves of the largest GPUs (the H200 keeps 8 such
// blocks on each of its 132 SMs); larger segments loop over their data.
constexpr int64_t kMaxBlocks = 4096;

// The launch's parameter. Segment s owns the flat block indices
// [first_block[s], first_block[s + 1]), in proportion to its size, so one
// large segment among small ones is not left to a handful of blocks.
struct SegmentTable {
  CopySegment segments[kBatchCopySegmentsPerLaunch];
  int32_t first_block[kBatchCopySegmentsPerLaunch + 1];
  int32_t count;
};
static_assert(sizeof(SegmentTable) <= 4000,
              "the table must fit the 4 KB kernel parameter limit");

template <typename W>
__device__ __forceinline__ void CopyWords(const W* __restrict__ src,
                                          W* __restrict__ dst, int64_t n,
                                          int64_t first, int64_t stride) {
  for (int64_t i = first; i < n; i += stride * kUnroll) {
    W v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < n) v[u] = src[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < n) dst[i + u * stride] = v[u];
    }
  }
}

// The n words of W of a segment, then its tail past them (fewer than
// sizeof(W) bytes) by its first thread.
template <typename W>
__device__ __forceinline__ void CopySegmentAs(const CopySegment& s,
                                              int64_t first, int64_t stride) {
  const int64_t n = s.bytes / static_cast<int64_t>(sizeof(W));
  CopyWords(static_cast<const W*>(s.src), static_cast<W*>(s.dst), n, first,
            stride);
  if constexpr (sizeof(W) > 1) {
    if (first != 0) return;
    const auto* src = static_cast<const unsigned char*>(s.src);
    auto* dst = static_cast<unsigned char*>(s.dst);
    for (int64_t b = n * static_cast<int64_t>(sizeof(W)); b < s.bytes; ++b) {
      dst[b] = src[b];
    }
  }
}

// __grid_constant__: the table is indexed in parameter memory, not copied
// to each thread's local memory.
__global__ void __launch_bounds__(kThreads)
    BatchCopyKernel(const __grid_constant__ SegmentTable table) {
  // The last segment whose first block is at or before this one.
  const int32_t b = static_cast<int32_t>(blockIdx.x);
  int lo = 0, hi = table.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table.first_block[mid] <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const CopySegment& s = table.segments[lo];
  const int64_t blocks = table.first_block[lo + 1] - table.first_block[lo];
  const int64_t first =
      int64_t{b - table.first_block[lo]} * blockDim.x + threadIdx.x;
  const int64_t stride = blocks * blockDim.x;
  // The same for every thread of the block: no divergence.
  const uintptr_t align =
      reinterpret_cast<uintptr_t>(s.src) | reinterpret_cast<uintptr_t>(s.dst);
  if (align % 16 == 0) {
    CopySegmentAs<uint4>(s, first, stride);
  } else if (align % 8 == 0) {
    CopySegmentAs<uint2>(s, first, stride);
  } else if (align % 4 == 0) {
    CopySegmentAs<uint32_t>(s, first, stride);
  } else if (align % 2 == 0) {
    CopySegmentAs<uint16_t>(s, first, stride);
  } else {
    CopySegmentAs<unsigned char>(s, first, stride);
  }
}

absl::Status Launch(SegmentTable& table, cudaStream_t stream) {
  int64_t wanted = 0;
  for (int s = 0; s < table.count; ++s) {
    wanted +=
        (table.segments[s].bytes + kBytesPerBlockPass - 1) / kBytesPerBlockPass;
  }
  int32_t next = 0;
  for (int s = 0; s < table.count; ++s) {
    int64_t blocks =
        (table.segments[s].bytes + kBytesPerBlockPass - 1) / kBytesPerBlockPass;
    if (wanted > kMaxBlocks) {
      blocks = std::max<int64_t>(1, blocks * kMaxBlocks / wanted);
    }
    table.first_block[s] = next;
    next += static_cast<int32_t>(blocks);
  }
  table.first_block[table.count] = next;
  BatchCopyKernel<<<next, kThreads, 0, stream>>>(table);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  table.count = 0;
  return absl::OkStatus();
}

}  // namespace

absl::Status BatchCopy(absl::Span<const CopySegment> segments,
                       cudaStream_t stream) {
  for (size_t i = 0; i < segments.size(); ++i) {
    const CopySegment& s = segments[i];
    if (s.bytes < 0 ||
        (s.bytes > 0 && (s.src == nullptr || s.dst == nullptr))) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy segment ", i, " of ", s.bytes, " bytes from ",
                       s.src == nullptr ? "null" : "a pointer", " to ",
                       s.dst == nullptr ? "null" : "a pointer"));
    }
  }
  SegmentTable table;
  table.count = 0;
  for (const CopySegment& s : segments) {
    if (s.bytes == 0) continue;
    table.segments[table.count++] = s;
    if (table.count == kBatchCopySegmentsPerLaunch) {
      if (absl::Status st = Launch(table, stream); !st.ok()) return st;
    }
  }
  if (table.count > 0) return Launch(table, stream);
  return absl::OkStatus();
}

}  // namespace coalesce::cuda
