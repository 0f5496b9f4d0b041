// Per-kernel launchers behind LaunchTranspose (transpose_kernels.h); one
// .cu file each. Internal to kernels/cuda.
#pragma once

#include "kernels/cuda/transpose_kernels.h"

namespace coalesce::cuda {

inline constexpr int kMaxRank = ::coalesce::kMaxRank;

// kNaive, kSmemTiled, kSmemPadded (transpose_basic.cu).
absl::Status LaunchTransposeBasic(TransposeKernel k, const TransposeShape& s,
                                  const void* in, void* out, ExecContext& ctx);
// word_rows 64 or 128 (transpose_vec16.cu).
absl::Status LaunchTransposeVec16(const TransposeShape& s, int word_rows,
                                  const void* in, void* out, ExecContext& ctx);
// transpose_small_dim.cu.
absl::Status LaunchTransposeSmallDim(const TransposeShape& s, const void* in,
                                     void* out, ExecContext& ctx);

}  // namespace coalesce::cuda
