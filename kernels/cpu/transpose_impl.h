// Cache-blocked 2-D transposes, shared by transpose.cpu.blocked and
// convert_layout.cpu.blocked (a permutation whose innermost dimension moves
// is a set of strided 2-D transposes). Elements are copied as raw 2- or
// 4-byte words, so the result is bit-exact whatever the dtype. Stateless and
// thread-safe; each call runs one OpenMP parallel loop over tiles.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "kernels/core/problem.h"

namespace coalesce::cpu {

// A set of equally shaped 2-D transposes ("slabs"). Slab s reads the
// rows x cols matrix at in + in_offset(s) (row stride in_ld) and writes its
// cols x rows transpose at out + out_offset(s) (row stride out_ld). The slab
// offsets come from batch dimensions enumerated row-major in the order given;
// callers list them in output order so consecutive slabs write neighbouring
// memory. All strides are in elements.
struct StridedTranspose {
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t in_ld = 1;
  int64_t out_ld = 1;
  absl::InlinedVector<int64_t, kMaxRank> batch_extent;
  absl::InlinedVector<int64_t, kMaxRank> batch_in_stride;
  absl::InlinedVector<int64_t, kMaxRank> batch_out_stride;
};

// elem_size is 2 or 4.
void TransposeBlocked(const StridedTranspose& t, size_t elem_size,
                      const void* in, void* out);

// Contiguous [batch, rows, cols] -> [batch, cols, rows].
void TransposeBatched(int64_t batch, int64_t rows, int64_t cols,
                      size_t elem_size, const void* in, void* out);

}  // namespace coalesce::cpu
