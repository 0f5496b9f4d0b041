// Per-kernel launchers behind LaunchTranspose (transpose_kernels.h); one
// .cu file each. Internal to kernels/cuda.
#pragma once

#include "kernels/cuda/transpose_kernels.h"

namespace coalesce::cuda {

inline constexpr int kMaxRank = ::coalesce::kMaxRank;

// kNaive, kSmemTiled, kSmemPadded (transpose_basic.cu).
absl::Status LaunchTransposeBasic(TransposeKernel k, const TransposeShape& s,
                                  const void* in, void* out, ExecContext& ctx);
// Tiles of 64 word-rows by cols (32 or 64) input columns
// (transpose_vec16.cu).
absl::Status LaunchTransposeVec16(const TransposeShape& s, int cols,
                                  const void* in, void* out, ExecContext& ctx);
// transpose_small_dim.cu.
absl::Status LaunchTransposeSmallDim(const TransposeShape& s, const void* in,
                                     void* out, ExecContext& ctx);

}  // namespace coalesce::cuda
