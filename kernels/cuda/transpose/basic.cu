// The seeds' transposes, kept as teaching baselines: naive (coalesced reads,
// strided writes: every 4-byte write touches its own 32-byte sector) and the
// 32x32 shared-memory tile with and without the +1 padding that removes the
// 32-way bank conflict on the column read.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/transpose/internal.h"

namespace coalesce::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(256)
    TransposeNaiveKernel(const T* __restrict__ in, T* __restrict__ out,
                         int64_t rows, int64_t cols, int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += stride) {
    const int64_t c = i % cols;
    const int64_t t = i / cols;
    const int64_t r = t % rows;
    const int64_t b = t / rows;
    out[(b * cols + c) * rows + r] = in[i];
  }
}

constexpr int kTile = 32;
constexpr int kBlockRows = 8;

template <typename T, int kPad>
__global__ void __launch_bounds__(kTile* kBlockRows)
    TransposeTiledKernel(const T* __restrict__ in, T* __restrict__ out,
                         int64_t rows, int64_t cols, int64_t tiles_r,
                         int64_t tiles_c, int64_t num_tiles) {
  __shared__ T tile[kTile][kTile + kPad];
  for (int64_t t = blockIdx.x; t < num_tiles; t += gridDim.x) {
    const int64_t tc = t % tiles_c;
    const int64_t tr = (t / tiles_c) % tiles_r;
    const int64_t b = t / (tiles_c * tiles_r);
    const T* src = in + b * rows * cols;
    T* dst = out + b * rows * cols;
    const int64_t c = tc * kTile + threadIdx.x;
#pragma unroll
    for (int j = 0; j < kTile; j += kBlockRows) {
      const int64_t r = tr * kTile + threadIdx.y + j;
      if (r < rows && c < cols) {
        tile[threadIdx.y + j][threadIdx.x] = src[r * cols + c];
      }
    }
    __syncthreads();
    const int64_t out_c = tr * kTile + threadIdx.x;  // an input row
#pragma unroll
    for (int j = 0; j < kTile; j += kBlockRows) {
      const int64_t out_r = tc * kTile + threadIdx.y + j;  // an input column
      if (out_r < cols && out_c < rows) {
        dst[out_r * rows + out_c] = tile[threadIdx.x][threadIdx.y + j];
      }
    }
    __syncthreads();
  }
}

// Grid size for grid-stride loops over many tiles: one tile per block up to
// the hardware limit.
int64_t GridFor(int64_t work_items) {
  return std::max<int64_t>(1, std::min<int64_t>(work_items, 0x7fffffff));
}

template <typename T>
absl::Status LaunchBasicTyped(TransposeKernel k, const TransposeShape& s,
                              const void* in_v, void* out_v,
                              ExecContext& ctx) {
  const T* in = static_cast<const T*>(in_v);
  T* out = static_cast<T*>(out_v);
  cudaStream_t stream = StreamOf(ctx);
  if (k == TransposeKernel::kNaive) {
    const int64_t total = s.batch * s.rows * s.cols;
    const dim3 block(256);
    const dim3 grid(static_cast<unsigned>(
        std::min<int64_t>(CeilDiv(total, 256), int64_t{1} << 20)));
    TransposeNaiveKernel<T><<<grid, block, 0, stream>>>(in, out, s.rows,
                                                        s.cols, total);
    RecordLaunch(TransposeNaiveKernel<T>, grid, block, 0, ctx);
  } else {
    const int64_t tiles_r = CeilDiv(s.rows, kTile);
    const int64_t tiles_c = CeilDiv(s.cols, kTile);
    const int64_t num_tiles = s.batch * tiles_r * tiles_c;
    const dim3 block(kTile, kBlockRows);
    const dim3 grid(static_cast<unsigned>(GridFor(num_tiles)));
    if (k == TransposeKernel::kSmemTiled) {
      TransposeTiledKernel<T, 0><<<grid, block, 0, stream>>>(
          in, out, s.rows, s.cols, tiles_r, tiles_c, num_tiles);
      RecordLaunch(TransposeTiledKernel<T, 0>, grid, block, 0, ctx);
    } else {
      TransposeTiledKernel<T, 1><<<grid, block, 0, stream>>>(
          in, out, s.rows, s.cols, tiles_r, tiles_c, num_tiles);
      RecordLaunch(TransposeTiledKernel<T, 1>, grid, block, 0, ctx);
    }
  }
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchTransposeBasic(TransposeKernel k, const TransposeShape& s,
                                  const void* in, void* out, ExecContext& ctx) {
  return s.elem_bytes == 4
             ? LaunchBasicTyped<uint32_t>(k, s, in, out, ctx)
             : LaunchBasicTyped<uint16_t>(k, s, in, out, ctx);
}

}  // namespace coalesce::cuda
