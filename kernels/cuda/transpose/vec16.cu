// vec16 and vec16_wide: 16-byte global loads and stores on both sides.
//
// The tile is held as 32-bit words, W[kWordRows][kCols + 1]:
// - float32: a word is one element; a thread loads 4 consecutive columns of
//   one row (16 bytes).
// - 16-bit types: a word is a 2x2 pair, (row 2p, col c) in the low half and
//   (row 2p+1, col c) in the high half: exactly two consecutive elements of
//   output row c. A thread loads 8 columns of rows 2p and 2p+1 (two 16-byte
//   loads) and pairs them with __byte_perm, so 16-bit types also move 16
//   bytes per access and the shared-memory transpose is a word transpose.
// The write phase gathers 4 words down a tile column into a uint4 and stores
// 16 bytes. Each warp loads a 32-column slab of 4 rows (float32) or 8 row
// pairs (16-bit) and writes 4 output rows x 32 words, so with a pitch of
// kCols + 1 words both the scattered shared stores of the load phase and the
// column gathers of the write phase hit 32 distinct banks (bank = row + col
// mod 32). Edge tiles run the same code with per-vector predicates: the
// divisibility CheckVec16Divisible demands makes every vector wholly inside
// or wholly outside the matrix.
#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/grid_dependency.cuh"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/transpose/internal.h"

namespace coalesce::cuda {
namespace {

constexpr int kThreads = 256;

template <int kElemBytes>
struct Elem;
template <>
struct Elem<4> {
  using T = uint32_t;
};
template <>
struct Elem<2> {
  using T = uint16_t;
};

template <int kElemBytes, int kWordRows, int kCols>
__global__ void __launch_bounds__(kThreads)
    TransposeVec16Kernel(const void* __restrict__ in_v,
                         void* __restrict__ out_v, int64_t rows, int64_t cols,
                         int64_t tiles_r, int64_t tiles_c, int64_t num_tiles) {
  using T = typename Elem<kElemBytes>::T;
  constexpr int kElemRows = kElemBytes == 4 ? kWordRows : 2 * kWordRows;
  constexpr int kSlabs = kCols / 32;
  constexpr int kWarpsPerSlab = (kThreads / 32) / kSlabs;
  // Word-rows one warp loads per pass: 4 float32 rows or 8 16-bit row pairs.
  constexpr int kWarpWordRows = kElemBytes == 4 ? 4 : 8;
  constexpr int kLoadPasses = kWordRows / (kWarpsPerSlab * kWarpWordRows);
  static_assert(kLoadPasses >= 1, "tile too short for the block");
  __shared__ uint32_t w[kWordRows][kCols + 1];
  const T* __restrict__ in = static_cast<const T*>(in_v);
  T* __restrict__ out = static_cast<T*>(out_v);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int slab = warp % kSlabs;
  const int wgrp = warp / kSlabs;
  const int64_t row_words = kElemBytes == 4 ? rows : rows / 2;
  if constexpr (kElemBytes == 4 && kWordRows == 64 && kCols == 32) {
    // Early start, as tma's: let the next kernel be scheduled and ask the
    // L2 for this block's tile (a line per 8 lanes) before the wait. On the
    // H200, back to back: 16% faster at float32 1024^2, up to 5.5% on
    // the larger transposes and layouts (coalesce-bench kernels
    // --dtypes=float32 --variants=vec16$). Only this tile: the 64-column
    // float32 tiles ran up to 12% slower with it, the 16-bit ones up to
    // 7.6% slower from 8192^2 up.
    AllowNextGrid();
    const int64_t t = blockIdx.x;
    const int row = wgrp * kWarpWordRows + lane / 8;
    const int col = slab * 32 + 4 * (lane % 8);
    if (t < num_tiles && lane % 8 == 0) {
      const int64_t tc = t % tiles_c;
      const int64_t tr = (t / tiles_c) % tiles_r;
      const int64_t b = t / (tiles_c * tiles_r);
      const T* src = in + b * rows * cols;
#pragma unroll
      for (int pass = 0; pass < kLoadPasses; ++pass) {
        const int64_t r =
            tr * kElemRows + pass * kWarpsPerSlab * kWarpWordRows + row;
        const int64_t c = tc * kCols + col;
        if (r < rows && c < cols) PrefetchL2(src + r * cols + c);
      }
    }
  }
  WaitForPriorGrid();

  for (int64_t t = blockIdx.x; t < num_tiles; t += gridDim.x) {
    const int64_t tc = t % tiles_c;
    const int64_t tr = (t / tiles_c) % tiles_r;
    const int64_t b = t / (tiles_c * tiles_r);
    const int64_t r0 = tr * kElemRows;
    const int64_t c0 = tc * kCols;
    const T* src = in + b * rows * cols;
    T* dst = out + b * rows * cols;

#pragma unroll
    for (int pass = 0; pass < kLoadPasses; ++pass) {
      if constexpr (kElemBytes == 4) {
        const int row =
            (pass * kWarpsPerSlab + wgrp) * kWarpWordRows + lane / 8;
        const int col = slab * 32 + 4 * (lane % 8);
        if (r0 + row < rows && c0 + col < cols) {
          const uint4 v = *reinterpret_cast<const uint4*>(
              src + (r0 + row) * cols + c0 + col);
          w[row][col + 0] = v.x;
          w[row][col + 1] = v.y;
          w[row][col + 2] = v.z;
          w[row][col + 3] = v.w;
        }
      } else {
        const int p = (pass * kWarpsPerSlab + wgrp) * kWarpWordRows + lane / 4;
        const int col = slab * 32 + 8 * (lane % 4);
        if (r0 + 2 * p < rows && c0 + col < cols) {
          const T* row0 = src + (r0 + 2 * p) * cols + c0 + col;
          const uint4 a = *reinterpret_cast<const uint4*>(row0);
          const uint4 c = *reinterpret_cast<const uint4*>(row0 + cols);
          w[p][col + 0] = __byte_perm(a.x, c.x, 0x5410);
          w[p][col + 1] = __byte_perm(a.x, c.x, 0x7632);
          w[p][col + 2] = __byte_perm(a.y, c.y, 0x5410);
          w[p][col + 3] = __byte_perm(a.y, c.y, 0x7632);
          w[p][col + 4] = __byte_perm(a.z, c.z, 0x5410);
          w[p][col + 5] = __byte_perm(a.z, c.z, 0x7632);
          w[p][col + 6] = __byte_perm(a.w, c.w, 0x5410);
          w[p][col + 7] = __byte_perm(a.w, c.w, 0x7632);
        }
      }
    }
    __syncthreads();

    uint32_t* dst_words = reinterpret_cast<uint32_t*>(dst);
    const int64_t r0_words = kElemBytes == 4 ? r0 : r0 / 2;
#pragma unroll
    for (int cpass = 0; cpass < kSlabs; ++cpass) {
      const int cc = cpass * 32 + warp * 4 + lane / 8;  // output row in tile
#pragma unroll
      for (int ppass = 0; ppass < kWordRows / 32; ++ppass) {
        const int p = ppass * 32 + 4 * (lane % 8);
        if (c0 + cc < cols && r0_words + p < row_words) {
          uint4 v;
          v.x = w[p + 0][cc];
          v.y = w[p + 1][cc];
          v.z = w[p + 2][cc];
          v.w = w[p + 3][cc];
          // __stwb forces one 16-byte st.global.v4: with a plain uint4
          // assignment ptxas split one of the two stores into four 4-byte
          // STG (register allocation), 2.5x the store requests (ncu).
          __stwb(reinterpret_cast<uint4*>(dst_words + (c0 + cc) * row_words +
                                          r0_words + p),
                 v);
        }
      }
    }
    __syncthreads();
  }
}

template <int kElemBytes, int kWordRows, int kCols>
absl::Status LaunchVec16Typed(const TransposeShape& s, const void* in,
                              void* out, ExecContext& ctx) {
  constexpr int kElemRows = kElemBytes == 4 ? kWordRows : 2 * kWordRows;
  const int64_t tiles_r = CeilDiv(s.rows, kElemRows);
  const int64_t tiles_c = CeilDiv(s.cols, kCols);
  const int64_t num_tiles = s.batch * tiles_r * tiles_c;
  const dim3 block(kThreads);
  const dim3 grid(static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(num_tiles, 0x7fffffff))));
  auto* kernel = TransposeVec16Kernel<kElemBytes, kWordRows, kCols>;
  LaunchAfterPriorGrid(kernel, grid, block, 0, ctx, in, out, s.rows, s.cols,
                       tiles_r, tiles_c, num_tiles);
  RecordLaunch(kernel, grid, block, 0, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

struct Vec16Tile {
  int rows, cols;  // in elements
};

// Half-height tiles where the matrix has no more rows, so that C = 64
// images do not leave half of every 16-bit tile idle. A 16-bit half tile
// has 64 columns either way: eight warps load the 64 word-rows of a
// 32-column tile in one pass, but only 32 exist.
Vec16Tile Vec16TileOf(const TransposeShape& s, bool wide) {
  if (s.elem_bytes == 4) return {s.rows <= 32 ? 32 : 64, wide ? 64 : 32};
  if (s.rows <= 64) return {64, 64};
  return {128, wide ? 64 : 32};
}

template <bool kWide>
absl::Status LaunchVec16(const TransposeShape& s, const void* in, void* out,
                         ExecContext& ctx) {
  const Vec16Tile t = Vec16TileOf(s, kWide);
  if (s.elem_bytes == 4) {
    if (t.rows == 32) {
      return t.cols == 64 ? LaunchVec16Typed<4, 32, 64>(s, in, out, ctx)
                          : LaunchVec16Typed<4, 32, 32>(s, in, out, ctx);
    }
    return t.cols == 64 ? LaunchVec16Typed<4, 64, 64>(s, in, out, ctx)
                        : LaunchVec16Typed<4, 64, 32>(s, in, out, ctx);
  }
  if (t.rows == 64) return LaunchVec16Typed<2, 32, 64>(s, in, out, ctx);
  return t.cols == 64 ? LaunchVec16Typed<2, 64, 64>(s, in, out, ctx)
                      : LaunchVec16Typed<2, 64, 32>(s, in, out, ctx);
}

// Fractions of the copy peak measured on the H200 at 8192^2 and 16384^2:
// 0.90-0.93 in float32, 0.84-0.90 in 16-bit, for both tile widths
// (coalesce-bench kernels --ops=transpose --variants=vec16
// --shape=1,8192,8192:1,16384,16384).
template <bool kWide>
double Vec16Efficiency(const TransposeShape& s) {
  const Vec16Tile t = Vec16TileOf(s, kWide);
  return (kWide ? 0.88 : 0.89) *
         TileUtilization(s.rows, s.cols, t.rows, t.cols);
}

}  // namespace

absl::Status CheckVec16Divisible(const TransposeShape& s) {
  COALESCE_RETURN_IF_ERROR(CheckTransposeElementBytes(s));
  // Elements per 16-byte vector, and per 16-byte store of paired 16-bit
  // rows.
  const int64_t m = s.elem_bytes == 4 ? 4 : 8;
  if (s.rows % m != 0 || s.cols % m != 0) {
    return absl::UnimplementedError(
        absl::StrCat("16-byte vectors need rows and cols divisible by ", m,
                     " for ", s.elem_bytes, "-byte elements"));
  }
  return absl::OkStatus();
}

const TransposeKernel kVec16Transpose = {
    &CheckVec16Divisible, &Vec16Efficiency<false>, &LaunchVec16<false>};
const TransposeKernel kVec16WideTranspose = {
    &CheckVec16Divisible, &Vec16Efficiency<true>, &LaunchVec16<true>};

}  // namespace coalesce::cuda
