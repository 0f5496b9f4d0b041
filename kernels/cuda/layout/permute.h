// The general permutation kernels of convert_layout (permute.cu), for any
// permutation collapsed by kernels/core/permute.h (rank <= kMaxRank). They
// move raw element bits (elem_bytes 2 or 4). Each kernel's PermuteKernel is
// defined beside it. Pointers are device pointers; launches go on ctx's
// stream and are recorded in ctx.launch. Thread-safe.
#pragma once

#include "absl/status/status.h"
#include "kernels/core/permute.h"
#include "kernels/core/variant.h"

namespace coalesce::cuda {

// One kernel's answers for a collapsed permutation; it runs any.
struct PermuteKernel {
  // Fraction of the copy roofline the kernel is expected to reach on c
  // with elements of elem_bytes on dev: the selection heuristic's input.
  double (*efficiency)(const CollapsedPermutation& c, int elem_bytes,
                       const DeviceInfo& dev);
  absl::Status (*launch)(int elem_bytes, const CollapsedPermutation& c,
                         const void* in, void* out, ExecContext& ctx);
};

// One thread per output element, the input offset recomputed from the
// output coordinates (div/mod per dimension).
extern const PermuteKernel kNaivePermute;
// A 32x33 shared-memory tile over the input's innermost dim and the dim
// that becomes the output's innermost, or a run copy (pieces of up to 16
// bytes, as the run length allows) when the innermost dim stays.
extern const PermuteKernel kTiledPermute;

}  // namespace coalesce::cuda
