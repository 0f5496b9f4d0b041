// Launchers for the data-movement kernels shared by the transpose and
// layout-conversion variants. All move raw element bits (elem_bytes 2 or 4),
// so one kernel serves float32 and the 16-bit types. Pointers are device
// pointers; launches go on ctx's stream and are recorded in ctx.launch.
// Thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/permute.h"
#include "kernels/core/variant.h"

namespace coalesce::cuda {

// Batched 2-D transposes [batch, rows, cols] -> [batch, cols, rows].
enum class TransposeKernel {
  kNaive,       // one thread per element: coalesced reads, strided writes
  kSmemTiled,   // 32x32 shared-memory tile, no padding (bank conflicts)
  kSmemPadded,  // 32x33 tile: conflict-free
  kVec16,       // 16-byte loads and stores, 64 word-rows x 32 columns
  kVec16Wide,   // the same with 64 columns: 128-byte row segments for
                // 16-bit types, twice the bytes in flight
  kTma,         // 256-byte tiles read by the tensor memory accelerator,
                // several in flight per persistent block (sm_90)
  kSmallDim,    // one side <= kSmallDimMax: both sides coalesced via a
                // shared-memory gather, no wasted tile columns
};

// The largest short side kSmallDim handles (AoS records of up to 16 fields,
// images of up to 16 channels).
inline constexpr int64_t kSmallDimMax = 16;

struct TransposeShape {
  int elem_bytes = 4;
  int64_t batch = 1, rows = 0, cols = 0;
};

// OK when kernel k can run shape s (alignment and size constraints), else
// UNIMPLEMENTED naming the constraint.
absl::Status TransposeSupports(TransposeKernel k, const TransposeShape& s);

// Fraction of the copy roofline kernel k is expected to reach on s: the
// heuristic's input (evidence: bench/results/h200).
double TransposeEfficiency(TransposeKernel k, const TransposeShape& s);

absl::Status LaunchTranspose(TransposeKernel k, const TransposeShape& s,
                             const void* in, void* out, ExecContext& ctx);

// General permutations (any collapsed rank <= 6).
enum class PermuteKernel {
  kNaive,  // one thread per output element, index arithmetic per element
  kTiled,  // 32x33 tile over the input's and output's innermost dims, or a
           // 16-byte run copy when the innermost dim is preserved
};

absl::Status LaunchPermute(PermuteKernel k, int elem_bytes,
                           const CollapsedPermutation& c, const void* in,
                           void* out, ExecContext& ctx);

}  // namespace coalesce::cuda
