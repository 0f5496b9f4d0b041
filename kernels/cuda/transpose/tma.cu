// Transpose with the Hopper tensor memory accelerator (TMA) on the read
// side: a persistent block keeps kStages input tiles in flight (64 or 96
// KB), each one two cp.async.bulk.tensor boxes, while its threads transpose the
// tile that has landed and store it with 16-byte writes.
//
// Why: vec16 stages each tile through registers, so a block has one tile's
// loads in flight and waits for them (ncu, bfloat16 4096^2: 41% issue
// active, long-scoreboard stalls dominant). Here loads cost no registers or
// thread instructions, and every block has 3 (16-bit) or 4 (float32) tiles
// requested ahead of the one it transposes.
//
// Tile: 256 bytes both ways, as vec16_wide's float32 tile: 128 rows x 128
// 16-bit columns or 64 x 64 float32, read as two boxes of 128-byte rows
// side by side. A thread takes a unit of kUnitRows consecutive rows x one
// 16-byte chunk (8 rows of 16-bit elements, 4 of float32): kUnitRows
// 16-byte shared loads, whose transpose is kUnitRows output pieces of 16
// bytes, one per column of the chunk (16-bit elements paired into words
// with __byte_perm, as in vec16). A warp's lanes take the 16 units down the
// tile for two chunks, so each of its 16-byte stores writes two output rows
// of 256 contiguous bytes.
//
// Bank conflicts: the lanes of a quarter warp then read the same chunk of
// 8 rows kUnitRows apart, the same banks in a dense tile, and a TMA box has
// no padding. So the tensor map views the matrix as 4-D, (column, unit row
// g, row within the unit r, batch) with strides (1, kUnitRows rows, 1 row,
// matrix): a box lands as [r][g][128 bytes], shared row s = r * kGroups +
// g, and the TMA's 128-byte swizzle (chunk k stored at k ^ (s % 8)) puts
// the 8 units of a quarter warp, g % 8 = 0..7, in 8 different chunks.
//
// Early start: every block first lets the stream's next kernel be
// scheduled (AllowNextGrid), then asks the L2 for each 128-byte line of its
// first tile, or of its first kStages tiles where the input is past 1.5x
// the L2 (TmaPrefetchesEveryStage), and only then waits for the previous
// kernel. Back to back, the next launch's blocks take the SM slots this
// one's last blocks free and fetch their first tiles while those blocks
// finish, so the DRAM stays busy across the kernel boundary: on the H200,
// the first tile alone made 1024^2 10-15% faster and 4096^2 2.7-3.6%
// (coalesce-bench kernels --ops=transpose --variants=tma).
//
// Edges: the TMA zero-fills what lies past the matrix and the expected
// transaction bytes are whole boxes; stores are predicated per 16-byte
// piece, which CheckVec16Divisible keeps wholly inside or outside.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/variant.h"
#include "kernels/cuda/runtime/async_copy.cuh"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/grid_dependency.cuh"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/runtime/tensor_map.h"
#include "kernels/cuda/transpose/internal.h"

namespace coalesce::cuda {
namespace {

constexpr char kName[] = "transpose.cuda.tma";
constexpr int kThreads = 256;
constexpr int kBoxRowBytes = 128;  // the 128-byte swizzle's span
constexpr int kBoxes = 2;          // side by side: 256-byte row segments
constexpr int kChunks = kBoxes * kBoxRowBytes / 16;
// Swizzled TMA destinations: 1024-byte aligned. Dynamic shared memory is
// only guaranteed 16, so the kernel rounds its base up and asks for the
// slack.
constexpr int kSmemAlign = 1024;

template <int kElemBytes>
struct Geometry {
  using T = std::conditional_t<kElemBytes == 4, uint32_t, uint16_t>;
  static constexpr int kChunkElems = 16 / kElemBytes;  // 8 or 4
  static constexpr int kBoxCols = kBoxRowBytes / kElemBytes;
  static constexpr int kTileCols = kBoxes * kBoxCols;
  // 256 bytes down each output row too: 64 float32 or 128 16-bit rows.
  static constexpr int kTileRows = 256 / kElemBytes;
  static constexpr int kUnitRows = kChunkElems;
  static constexpr int kGroups = kTileRows / kUnitRows;  // 16
  static constexpr int kLanesPerChunk = kGroups;
  static constexpr int kUnitsPerThread = kGroups * kChunks / kThreads;
  static constexpr int kBoxBytes = kTileRows * kBoxRowBytes;
  static constexpr int kTileBytes = kBoxes * kBoxBytes;  // 16 or 32 KB
  // Stages of 64 KB a block and 3 blocks an SM in float32 (24 warps, 12
  // tiles in flight an SM); 96 KB and 2 blocks in 16-bit (6 tiles), 0.4-5%
  // faster back to back on the H200 than 64 KB and 3 blocks, the most at
  // 4096^2 (coalesce-bench kernels --ops=transpose --dtypes=bfloat16
  // --variants=tma). The bound also keeps ptxas from the 64 registers and a
  // spill it chose without one.
  static constexpr int kStages = kElemBytes == 4 ? 4 : 3;
  static constexpr int kBlocksPerSm = kElemBytes == 4 ? 3 : 2;
  static constexpr int kSmemBytes = kSmemAlign + kStages * kTileBytes;
  static_assert(kGroups % 8 == 0, "s % 8 == g % 8 needs whole 8-row sets");
  static_assert(kLanesPerChunk <= 32 && kUnitsPerThread >= 1, "layout");
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

// The chunk (column of 16 bytes) of this thread's unit u: lanes with the
// same chunk take consecutive unit rows, group = lane % kLanesPerChunk.
template <int kElemBytes>
__device__ __forceinline__ int ChunkOf(int u, int warp, int lane) {
  using G = Geometry<kElemBytes>;
  constexpr int kChunksPerWarp = 32 / G::kLanesPerChunk;  // 2 or 1
  return lane / G::kLanesPerChunk +
         kChunksPerWarp * (warp + u * (kThreads / 32));
}

struct TileCoord {
  int64_t b, tr, tc;  // batch entry, tile row, tile column
};

template <int kElemBytes>
__global__ void __launch_bounds__(kThreads, Geometry<kElemBytes>::kBlocksPerSm)
    TransposeTmaKernel(const __grid_constant__ CUtensorMap map,
                       const void* __restrict__ in_v, void* __restrict__ out_v,
                       int64_t rows, int64_t cols, int64_t tiles_r,
                       int64_t tiles_c, int64_t num_tiles, int prefetch_tiles) {
  using G = Geometry<kElemBytes>;
  using T = typename G::T;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int kStages = G::kStages;
  constexpr int kTileBytes = G::kTileBytes;
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
#pragma unroll
    for (int box = 0; box < kBoxes; ++box) {
      TmaLoad4d(base + s * kTileBytes + box * G::kBoxBytes, &map,
                static_cast<int>(c.tc * G::kTileCols + box * G::kBoxCols),
                static_cast<int>(c.tr * G::kGroups), 0, static_cast<int>(c.b),
                bar);
    }
  };

  AllowNextGrid();
  // Each 128-byte line (half a tile row) of the first tiles, once.
  const int64_t lines =
      std::min<int64_t>(prefetch_tiles, count) * G::kTileRows * 2;
  for (int64_t j = tid; j < lines; j += kThreads) {
    const TileCoord c = tile_of(j / (2 * G::kTileRows));
    const int64_t row = c.tr * G::kTileRows + (j / 2) % G::kTileRows;
    const int64_t col = c.tc * G::kTileCols + (j % 2) * G::kBoxCols;
    if (row < rows && col < cols) {
      PrefetchL2(static_cast<const T*>(in_v) + c.b * rows * cols + row * cols +
                 col);
    }
  }
  WaitForPriorGrid();
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
      const int chunk = ChunkOf<kElemBytes>(u, warp, lane);
      const int group = lane % G::kLanesPerChunk;
#pragma unroll
      for (int r = 0; r < G::kUnitRows; ++r) {
        x[u][r] =
            tile[(chunk / 8) * (G::kBoxBytes / 16) +
                 (r * G::kGroups + group) * 8 + ((chunk % 8) ^ (group % 8))];
      }
    }
    // Every thread has read stage s: it may be refilled.
    __syncthreads();
    if (tid == 0 && i + kStages < count) issue(i + kStages);

    const TileCoord c = tile_of(i);
    T* dst = static_cast<T*>(out_v) + c.b * rows * cols;
#pragma unroll
    for (int u = 0; u < G::kUnitsPerThread; ++u) {
      const int chunk = ChunkOf<kElemBytes>(u, warp, lane);
      const int group = lane % G::kLanesPerChunk;
      const int64_t r0 = c.tr * G::kTileRows + group * G::kUnitRows;
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
  // (column, unit row, row in the unit, batch): see the file comment.
  const int64_t es = kElemBytes;
  const int64_t dims[4] = {s.cols, s.rows / G::kUnitRows, G::kUnitRows,
                           s.batch};
  const int64_t strides[3] = {G::kUnitRows * s.cols * es, s.cols * es,
                              s.rows * s.cols * es};
  const int box[4] = {G::kBoxCols, G::kGroups, G::kUnitRows, 1};
  CUtensorMap map;
  COALESCE_RETURN_IF_ERROR(EncodeTensorMap(
      &map,
      kElemBytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                      : CU_TENSOR_MAP_DATA_TYPE_UINT16,
      in, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, kName));
  const int64_t tiles_r = CeilDiv(s.rows, G::kTileRows);
  const int64_t tiles_c = CeilDiv(s.cols, G::kTileCols);
  const int64_t num_tiles = s.batch * tiles_r * tiles_c;
  auto* kernel = TransposeTmaKernel<kElemBytes>;
  COALESCE_RETURN_IF_ERROR(AllowDynamicSharedMemory(kernel, G::kSmemBytes));
  const dim3 block(kThreads);
  const dim3 grid(static_cast<unsigned>(
      PersistentGrid(kernel, kThreads, G::kSmemBytes, ctx, num_tiles)));
  LaunchAfterPriorGrid(kernel, grid, block, G::kSmemBytes, ctx, map, in, out,
                       s.rows, s.cols, tiles_r, tiles_c, num_tiles,
                       TmaPrefetchesEveryStage(s, ctx) ? G::kStages : 1);
  RecordLaunch(kernel, grid, block, G::kSmemBytes, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status LaunchTma(const TransposeShape& s, const void* in, void* out,
                       ExecContext& ctx) {
  if (reinterpret_cast<uintptr_t>(in) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": operands must be 16-byte aligned"));
  }
  return s.elem_bytes == 4 ? LaunchTmaTyped<4>(s, in, out, ctx)
                           : LaunchTmaTyped<2>(s, in, out, ctx);
}

// Fractions of the copy peak on the H200, back to back (coalesce-bench
// kernels --ops=transpose --variants=tma,vec16_wide): 16-bit 0.85-0.93,
// 1-8% ahead of vec16_wide; float32 0.91-0.94, up to 2% behind it except at
// 4096^2.
double TmaEfficiency(const TransposeShape& s) {
  return s.elem_bytes == 4
             ? 0.87 * TileUtilization(s.rows, s.cols, Geometry<4>::kTileRows,
                                      Geometry<4>::kTileCols)
             : 0.91 * TileUtilization(s.rows, s.cols, Geometry<2>::kTileRows,
                                      Geometry<2>::kTileCols);
}

}  // namespace

// Between 4096^2 (inputs up to 67 MB; the L2 is 60), where prefetching
// every stage ran 4-10% slower (more L2 lookup misses), and the inputs from
// 100 MB up, where it ran 1.4-2.6% faster than the first tile alone, on the
// H200 (coalesce-bench kernels --ops=transpose --variants=tma).
bool TmaPrefetchesEveryStage(const TransposeShape& s, const ExecContext& ctx) {
  const int64_t l2 = ctx.device != nullptr ? ctx.device->l2_cache_bytes : 0;
  return l2 > 0 && 2 * s.batch * s.rows * s.cols * s.elem_bytes > 3 * l2;
}

const TransposeKernel kTmaTranspose = {&CheckVec16Divisible, &TmaEfficiency,
                                       &LaunchTma};

}  // namespace coalesce::cuda
