// Per-kernel launchers behind LaunchTranspose (transpose_kernels.h); one
// .cu file each. Internal to kernels/cuda.
#pragma once

#include "kernels/cuda/transpose/kernels.h"

namespace coalesce::cuda {

inline constexpr int kMaxRank = ::coalesce::kMaxRank;

// kNaive, kSmemTiled, kSmemPadded (transpose_basic.cu).
absl::Status LaunchTransposeBasic(TransposeKernel k, const TransposeShape& s,
                                  const void* in, void* out, ExecContext& ctx);
// transpose_vec16.cu: tiles of Vec16TileOf's element rows x columns.
struct Vec16Tile {
  int rows, cols;
};
Vec16Tile Vec16TileOf(const TransposeShape& s, bool wide);
absl::Status LaunchTransposeVec16(const TransposeShape& s, bool wide,
                                  const void* in, void* out, ExecContext& ctx);

// transpose_tma.cu: tiles of TmaTileOf's element rows x columns, read by the
// tensor memory accelerator.
Vec16Tile TmaTileOf(const TransposeShape& s);
// Whether tma's early start prefetches every stage's tile, not only the
// first: inputs past 1.5x ctx's L2.
bool TmaPrefetchesEveryStage(const TransposeShape& s, const ExecContext& ctx);
absl::Status LaunchTransposeTma(const TransposeShape& s, const void* in,
                                void* out, ExecContext& ctx);
// transpose_small_dim.cu. SmallDimInRegisters: whether s takes the
// register path (a short side of 2 or more, the long side whole 16-byte
// vectors) rather than the shared-memory one.
bool SmallDimInRegisters(const TransposeShape& s);
// The blocks of the shared-memory path: one per chunk of about 8 KB.
int64_t SmallDimSharedBlocks(const TransposeShape& s);
absl::Status LaunchTransposeSmallDim(const TransposeShape& s, const void* in,
                                     void* out, ExecContext& ctx);

}  // namespace coalesce::cuda
