// Transpose with the Hopper tensor memory accelerator (TMA) on the read
// side: a persistent block keeps kStages input tiles in flight, each one a
// single cp.async.bulk.tensor of a 16 KB box, while its threads transpose
// the tile that has landed and store it with 16-byte writes.
//
// Why: vec16 stages each tile through registers, so a block has one tile's
// loads in flight and waits for them (ncu, bfloat16 4096^2: 41% issue
// active, long-scoreboard stalls dominant). Here loads cost no registers or
// thread instructions, and every block has up to kStages tiles requested
// ahead of the one it transposes.
//
// Tile: 64 rows x 16 chunks, a chunk being 16 bytes of one row (8 16-bit or
// 4 float32 elements): 64 x 128 16-bit or 64 x 64 float32 elements, stored
// densely by the TMA (256-byte rows). A thread takes a unit of kUnitRows
// consecutive rows of one chunk column (8 rows of 16-bit elements, 4 of
// float32): kUnitRows 16-byte shared loads, which are kUnitRows x kUnitRows
// elements; their transpose is kUnitRows output pieces of 16 bytes (16-bit
// elements paired into words with __byte_perm, as in vec16), one per column
// of the chunk. Lanes 8j..8j+7 of a warp take chunks 8c..8c+7 of one unit
// row, so each quarter warp's 16-byte loads cover 128 contiguous bytes:
// no bank conflicts without padding, which a TMA box cannot have. A warp's
// stores then cover 8 output rows x 64 contiguous bytes (4 units of 16).
//
// Edges: the TMA zero-fills what lies past the matrix and the expected
// transaction bytes are whole boxes; stores are predicated per 16-byte
// piece, which TransposeSupports' divisibility (as vec16's) keeps wholly
// inside or outside.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "kernels/core/status_macros.h"
#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_map.h"
#include "kernels/cuda/transpose_internal.h"

namespace coalesce::cuda {
namespace {

constexpr char kName[] = "transpose.cuda.tma";
constexpr int kThreads = 128;
constexpr int kStages = 4;
constexpr int kTileRows = 64;
constexpr int kChunksPerRow = 16;
constexpr int kTileBytes = kTileRows * kChunksPerRow * 16;
// TMA destinations: 128-byte aligned. Dynamic shared memory is only
// guaranteed 16, so the kernel rounds its base up and asks for the slack.
constexpr int kSmemAlign = 128;
constexpr int kSmemBytes = kSmemAlign + kStages * kTileBytes;

template <int kElemBytes>
struct Geometry {
  using T = std::conditional_t<kElemBytes == 4, uint32_t, uint16_t>;
  static constexpr int kChunkElems = 16 / kElemBytes;  // 8 or 4
  static constexpr int kTileCols = kChunksPerRow * kChunkElems;
  static constexpr int kUnitRows = kChunkElems;
  static constexpr int kUnitGroups = kTileRows / kUnitRows;
  static constexpr int kUnitsPerThread =
      kUnitGroups * kChunksPerRow / kThreads;  // 1 or 2
};

// Word i of v; i is a constant after unrolling, so no local memory.
__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Piece c of the transposed kUnitRows x kUnitRows unit x: elements (r, c)
// for r = 0..kUnitRows-1, as 16 bytes.
template <int kElemBytes>
__device__ __forceinline__ uint4 UnitColumn(const uint4 (&x)[16 / kElemBytes],
                                            int c) {
  if constexpr (kElemBytes == 4) {
    return make_uint4(Word(x[0], c), Word(x[1], c), Word(x[2], c),
                      Word(x[3], c));
  } else {
    // Word c / 2 of rows 2m and 2m+1 holds their columns c & ~1 (low
    // halves) and c | 1 (high halves).
    const uint32_t sel = c % 2 == 0 ? 0x5410 : 0x7632;
    const auto w = [&](int m) {
      return __byte_perm(Word(x[2 * m], c / 2), Word(x[2 * m + 1], c / 2), sel);
    };
    return make_uint4(w(0), w(1), w(2), w(3));
  }
}

struct TileCoord {
  int64_t b, tr, tc;  // batch entry, tile row, tile column
};

template <int kElemBytes>
__global__ void __launch_bounds__(kThreads)
    TransposeTmaKernel(const __grid_constant__ CUtensorMap map,
                       void* __restrict__ out_v, int64_t rows, int64_t cols,
                       int64_t tiles_r, int64_t tiles_c, int64_t num_tiles) {
  using G = Geometry<kElemBytes>;
  using T = typename G::T;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ uint64_t full[kStages];
  const uint32_t base =
      (SharedAddress(smem_raw) + kSmemAlign - 1) & ~uint32_t{kSmemAlign - 1};
  const unsigned char* tiles = smem_raw + (base - SharedAddress(smem_raw));
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  // This block's tiles: blockIdx.x, + gridDim.x, ...
  const int64_t first = blockIdx.x;
  const int64_t step = gridDim.x;
  const int64_t count = (num_tiles - first + step - 1) / step;

  const auto tile_of = [&](int64_t i) {
    const int64_t t = first + i * step;
    return TileCoord{t / (tiles_c * tiles_r), (t / tiles_c) % tiles_r,
                     t % tiles_c};
  };
  const auto issue = [&](int64_t i) {
    const TileCoord c = tile_of(i);
    const int s = static_cast<int>(i % kStages);
    const uint32_t bar = SharedAddress(&full[s]);
    MbarArriveExpectTx(bar, kTileBytes);
    TmaLoad3d(base + s * kTileBytes, &map,
              static_cast<int>(c.tc * G::kTileCols),
              static_cast<int>(c.tr * kTileRows), static_cast<int>(c.b), bar);
  };

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) MbarInit(SharedAddress(&full[s]), 1);
    MbarInitFence();
    for (int64_t i = 0; i < std::min<int64_t>(kStages, count); ++i) issue(i);
  }
  __syncthreads();

  for (int64_t i = 0; i < count; ++i) {
    const int s = static_cast<int>(i % kStages);
    MbarWait(SharedAddress(&full[s]), static_cast<uint32_t>(i / kStages) & 1);
    const uint4* tile = reinterpret_cast<const uint4*>(tiles + s * kTileBytes);
    uint4 x[G::kUnitsPerThread][G::kUnitRows];
#pragma unroll
    for (int u = 0; u < G::kUnitsPerThread; ++u) {
      // Warp unit w: chunks 8 (w % 2) .. + 7, unit rows 4 (w / 2) .. + 3.
      const int w = u * (kThreads / 32) + warp;
      const int chunk = 8 * (w % 2) + lane % 8;
      const int group = 4 * (w / 2) + lane / 8;
#pragma unroll
      for (int r = 0; r < G::kUnitRows; ++r) {
        x[u][r] = tile[(group * G::kUnitRows + r) * kChunksPerRow + chunk];
      }
    }
    // Every thread has read stage s: it may be refilled.
    __syncthreads();
    if (tid == 0 && i + kStages < count) issue(i + kStages);

    const TileCoord c = tile_of(i);
    T* dst = static_cast<T*>(out_v) + c.b * rows * cols;
#pragma unroll
    for (int u = 0; u < G::kUnitsPerThread; ++u) {
      const int w = u * (kThreads / 32) + warp;
      const int chunk = 8 * (w % 2) + lane % 8;
      const int group = 4 * (w / 2) + lane / 8;
      const int64_t r0 = c.tr * kTileRows + group * G::kUnitRows;
      if (r0 >= rows) continue;
#pragma unroll
      for (int e = 0; e < G::kChunkElems; ++e) {
        const int64_t oc = c.tc * G::kTileCols + chunk * G::kChunkElems + e;
        if (oc < cols) {
          __stwb(reinterpret_cast<uint4*>(dst + oc * rows + r0),
                 UnitColumn<kElemBytes>(x[u], e));
        }
      }
    }
  }
}

template <int kElemBytes>
absl::Status LaunchTmaTyped(const TransposeShape& s, const void* in, void* out,
                            ExecContext& ctx) {
  using G = Geometry<kElemBytes>;
  CUtensorMap map;
  COALESCE_RETURN_IF_ERROR(EncodeTensorMap3d(
      &map,
      kElemBytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                      : CU_TENSOR_MAP_DATA_TYPE_UINT16,
      in, {s.cols, s.rows, s.batch},
      {s.cols * kElemBytes, s.rows * s.cols * kElemBytes},
      {G::kTileCols, kTileRows, 1}, CU_TENSOR_MAP_SWIZZLE_NONE, kName));
  const int64_t tiles_r = CeilDiv(s.rows, kTileRows);
  const int64_t tiles_c = CeilDiv(s.cols, G::kTileCols);
  const int64_t num_tiles = s.batch * tiles_r * tiles_c;
  auto* kernel = TransposeTmaKernel<kElemBytes>;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const dim3 block(kThreads);
  const dim3 grid(static_cast<unsigned>(
      PersistentGrid(kernel, kThreads, kSmemBytes, ctx, num_tiles)));
  kernel<<<grid, block, kSmemBytes, StreamOf(ctx)>>>(
      map, out, s.rows, s.cols, tiles_r, tiles_c, num_tiles);
  RecordLaunch(kernel, grid, block, kSmemBytes, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace

Vec16Tile TmaTileOf(const TransposeShape& s) {
  return {kTileRows,
          s.elem_bytes == 4 ? Geometry<4>::kTileCols : Geometry<2>::kTileCols};
}

absl::Status LaunchTransposeTma(const TransposeShape& s, const void* in,
                                void* out, ExecContext& ctx) {
  if (reinterpret_cast<uintptr_t>(in) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return absl::InvalidArgumentError(
        "transpose.cuda.tma: operands must be 16-byte aligned");
  }
  return s.elem_bytes == 4 ? LaunchTmaTyped<4>(s, in, out, ctx)
                           : LaunchTmaTyped<2>(s, in, out, ctx);
}

}  // namespace coalesce::cuda
