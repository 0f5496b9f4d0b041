// gemm.cuda.tensor_core: warp-level tensor-core GEMM (mma.sync) fed by a
// 3-stage cp.async pipeline; float16 and bfloat16 (m16n8k16), and float32
// as TF32 (m16n8k8) when the problem allows it. float32 accumulation.
//
// - Block tile 128x256, 8 warps as 2x4, each warp a 64x64 sub-tile: 4x8
//   mma tiles of 16x8, 128 accumulator registers per thread (CUTLASS's
//   sm80 recipe). Per k step a warp issues 8 fragment loads (4 for A, 4 for
//   B) for 32 mma; a 128x128 tile of 8 warps of 64x32 issues 6 for 16, and
//   at 2 blocks per SM its 128-register cap spills. 128x256 rather than
//   128x128 with 4 warps at 2 blocks per SM: a 128x128 tile moves 1/64 byte
//   from L2 per flop, about 5 TB/s at 330 TFLOP/s; 128x256 moves 3/256
//   (25% less). One block per SM, __launch_bounds__(256, 1): up to 255
//   registers.
// - A k-tile is 128 bytes of k per row (64 16-bit elements or 32 floats),
//   4 mma k steps: on the 128x128 tile, 64 bytes (and 4 stages) ran
//   292-300 TFLOP/s at 4096^3 on the H200 and 128 bytes 327-332.
//   Operands are copied to shared memory verbatim, 16 bytes per cp.async,
//   in their stored orientation, and the fragment loads absorb transposes:
//   ldmatrix for k-contiguous tiles, ldmatrix.trans for 16-bit
//   mn-contiguous tiles, and plain 32-bit shared loads for float32
//   mn-contiguous tiles (ldmatrix.trans moves 16-bit units).
// - Every shared row is padded by 16 bytes: row pitches of 144, 272 or 528
//   bytes put the 8 row addresses of an ldmatrix phase in 8 different
//   16-byte bank groups, and the float32 mn-contiguous loads (address
//   4t*pitch + g for lane 4g+t, pitch 132 or 260 words: 528 or 1040 bytes)
//   in 32 different banks.
// - Pipeline (CUTLASS's multistage main loop): fragments are
//   double-buffered in registers, the loads of k step s+1 issued before
//   the mma of step s; the one __syncthreads per k-tile sits before the
//   last k step, so the first step's fragments of the next k-tile load
//   while the last step's mma run. The copies of k-tile t+2 are issued in
//   kCopySteps slices during the first k steps of tile t and must land by
//   the barrier of tile t+1, about 1.5 k-tiles later. Chunks outside the
//   matrix are zero-filled through cp.async's src-size operand, so edge
//   tiles need no special path: each chunk is wholly inside or outside
//   because rows are multiples of 16 bytes (CanImplement).
// - Epilogue straight from the accumulator registers (the mma.sync C
//   layout is documented): alpha, beta*C, conversion to the output type.
//
// Register use (nvcc 13.0, sm_90, -Xptxas -v): 234-238 registers for the
// 16-bit instantiations, 244-255 for TF32 (its cvt.rna conversions and the
// float32 mn-contiguous loads' addresses), no spills; 147-162 KB of dynamic
// shared memory (3 stages), so one block per SM (an A100's 163 KB still
// holds it). mma.sync rather than WMMA: WMMA's 16-bit fragments hold twice
// the registers, and a WMMA 128x128 tiling needed 240-255 and spilled.
// On the H200: 309 / 314 us at 4096^3 bfloat16 / float16 (444 / 438
// TFLOP/s, 0.55 / 0.56 of cuBLASLt; 412 / 417 us on the 128x128 tile) and
// 0.59-0.61 of cuBLASLt at 8192^3: `coalesce-bench kernels --ops=gemm
// --dtypes=bfloat16,float16 --shape=1,4096,4096,4096
// --variants=tensor_core,cublaslt`. Smaller problems lose from the larger
// tile (1000^3: 25.8 us against 22.6 on 128x128), and skinny problems get
// half the blocks.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/gemm/common.cuh"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

constexpr char kName[] = "gemm.cuda.tensor_core";
constexpr int kBM = 128;
constexpr int kBN = 256;
constexpr int kThreads = 256;
constexpr int kWarpM = 64;  // each warp's sub-tile
constexpr int kWarpN = 64;
constexpr int kWarpsN = kBN / kWarpN;
constexpr int kTilesM = kWarpM / 16;  // m16 mma tiles per warp
constexpr int kTilesN = kWarpN / 8;   // n8 mma tiles per warp
static_assert((kBM / kWarpM) * kWarpsN * 32 == kThreads, "warp layout");
constexpr int kStages = 3;
constexpr int kKBytes = 128;  // bytes of k per shared row per stage
constexpr int kChunk = 16;    // bytes per cp.async
// A k-tile's copies are issued in this many slices, one per k step from
// the first; at most the k steps before the barrier's (3). Not yet tuned on
// the H200.
constexpr int kCopySteps = 2;
// A fraction of the 16-bit tensor peak (1070 TFLOP/s at 1980 MHz): 444 and
// 438 TFLOP/s at 4096^3 on the H200 in bfloat16 and float16 (the command
// in the file comment).
constexpr double kEfficiency = 0.41;
// Waves of tiles (TensorWavesSeconds), fitted to the 16-bit H200 selection
// sweeps' seed-7 shapes (386 with tensor_core measured; every class,
// kernels/cuda/testdata/gemm_classes_seed7.txt): 5.4 us per wave and
// 15.7 ns per K (0.51 of the peak per SM), median error 9%.
constexpr double kWaveSeconds = 5.4e-6;
constexpr double kWavePeakFraction = 0.51;

// Shared-memory geometry of one stage, in elements of T.
template <typename T, bool kTransA, bool kTransB>
struct Smem {
  static constexpr int kBK = kKBytes / sizeof(T);
  static constexpr int kPad = kChunk / sizeof(T);
  // A not transposed: [kBM][kBK] (m rows); transposed: [kBK][kBM] (k rows).
  static constexpr int kRowsA = kTransA ? kBK : kBM;
  static constexpr int kColsA = kTransA ? kBM : kBK;
  static constexpr int kLdA = kColsA + kPad;
  // B not transposed: [kBK][kBN] (k rows); transposed: [kBN][kBK].
  static constexpr int kRowsB = kTransB ? kBN : kBK;
  static constexpr int kColsB = kTransB ? kBK : kBN;
  static constexpr int kLdB = kColsB + kPad;
  static constexpr int kElemsA = kRowsA * kLdA;
  static constexpr int kElemsB = kRowsB * kLdB;
  static constexpr int kStageElems = kElemsA + kElemsB;
  static constexpr int kBytes = kStages * kStageElems * sizeof(T);
  // cp.async and ldmatrix need 16-byte aligned rows and regions.
  static_assert(kLdA * sizeof(T) % 16 == 0 && kLdB * sizeof(T) % 16 == 0,
                "row pitch alignment");
  static_assert(kElemsA * sizeof(T) % 128 == 0, "A region alignment");
  static_assert(kElemsB * sizeof(T) % 128 == 0, "B region alignment");
};

// Four 8x8 matrices of 16-bit elements; lanes 8i..8i+7 give the row
// addresses of matrix i, and register i of lane l receives row l/4,
// elements 2(l%4) and 2(l%4)+1 of matrix i (columns instead of rows with
// .trans).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4],
                                                uint32_t addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, "
      "[%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(addr));
}

// Round to nearest TF32 (what the conformance bound assumes), instead of
// letting the tensor core truncate the low mantissa bits.
__device__ __forceinline__ uint32_t ToTf32(uint32_t bits) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(bits)));
  return r;
}

// D += A * B for one 16x8 tile. Fragments (g = lane/4, t = lane%4):
// 16-bit m16n8k16: a = {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..),
// (g+8, 2t+8..)}, b = {(2t..2t+1, g), (2t+8.., g)}; TF32 m16n8k8:
// a = {(g, t), (g+8, t), (g, t+4), (g+8, t+4)}, b = {(t, g), (t+4, g)};
// d = {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)} for both.
template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4],
                                    const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// k per mma: 16 for 16-bit types, 8 for TF32.
template <typename T>
inline constexpr int kMmaK = sizeof(T) == 2 ? 16 : 8;

// A fragments of the 16-row slab at row m0 of the tile, k step kk.
template <typename T, bool kTransA>
__device__ __forceinline__ void LoadFragA(uint32_t (&a)[4], const T* sa, int ld,
                                          int m0, int kk, int lane) {
  if constexpr (!kTransA) {
    // Stored [m][k]: lanes 0-15 address rows m0..m0+15 at kk, lanes 16-31
    // the same rows 16 bytes further: matrices (rows 0-7, k lo), (8-15, lo),
    // (0-7, hi), (8-15, hi) are exactly a0..a3 for both element sizes.
    LdMatrixX4(a, SharedAddress(sa + (m0 + lane % 16) * ld + kk +
                                (lane / 16) * (16 / sizeof(T))));
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = ToTf32(a[i]);
    }
  } else if constexpr (sizeof(T) == 2) {
    // Stored [k][m]: transposed 8x8 loads; matrix i covers k rows
    // kk + 8(i/2).., m columns m0 + 8(i%2)..
    const int mi = lane / 8;
    LdMatrixX4Trans(a, SharedAddress(sa + (kk + lane % 8 + (mi / 2) * 8) * ld +
                                     m0 + (mi % 2) * 8));
  } else {
    // Stored [k][m] float32: element by element.
    const int g = lane / 4;
    const int t = lane % 4;
    const T* p = sa + (kk + t) * ld + m0 + g;
    a[0] = ToTf32(__float_as_uint(p[0]));
    a[1] = ToTf32(__float_as_uint(p[8]));
    a[2] = ToTf32(__float_as_uint(p[4 * ld]));
    a[3] = ToTf32(__float_as_uint(p[4 * ld + 8]));
  }
}

// B fragments of the two 8-column tiles at columns n0 and n0+8, k step kk.
template <typename T, bool kTransB>
__device__ __forceinline__ void LoadFragB(uint32_t (&b0)[2], uint32_t (&b1)[2],
                                          const T* sb, int ld, int n0, int kk,
                                          int lane) {
  uint32_t r[4];
  const int mi = lane / 8;
  if constexpr (kTransB) {
    // Stored [n][k]: matrix i covers n rows n0 + 8(i/2).., k columns
    // kk + (16 bytes)(i%2): (b0, b1) of column tile n0, then of n0+8.
    LdMatrixX4(r, SharedAddress(sb + (n0 + lane % 8 + (mi / 2) * 8) * ld + kk +
                                (mi % 2) * (16 / sizeof(T))));
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) r[i] = ToTf32(r[i]);
    }
  } else if constexpr (sizeof(T) == 2) {
    // Stored [k][n]: transposed; matrix i covers k rows kk + 8(i%2).., n
    // columns n0 + 8(i/2)..
    LdMatrixX4Trans(r, SharedAddress(sb + (kk + lane % 8 + (mi % 2) * 8) * ld +
                                     n0 + (mi / 2) * 8));
  } else {
    // Stored [k][n] float32: element by element.
    const int g = lane / 4;
    const int t = lane % 4;
    const T* p = sb + (kk + t) * ld + n0 + g;
    r[0] = ToTf32(__float_as_uint(p[0]));
    r[1] = ToTf32(__float_as_uint(p[4 * ld]));
    r[2] = ToTf32(__float_as_uint(p[8]));
    r[3] = ToTf32(__float_as_uint(p[4 * ld + 8]));
  }
  b0[0] = r[0];
  b0[1] = r[1];
  b1[0] = r[2];
  b1[1] = r[3];
}

// One thread's share of the copies of one operand's k-tiles. The stored
// tile is kRows x kCols elements (row pitch kLd in shared memory);
// consecutive threads take consecutive 16-byte chunks of a row
// (coalesced), so this thread's chunks sit in rows row0 + it * kRowsPerIter
// at column col0. kKRows: the tile's rows run along k (an mn-contiguous
// operand), else its columns do. The state is a few registers: the chunk
// addresses differ by a multiple of row_step, the bounds checks compare
// against two running counts.
template <typename T, int kRows, int kCols, int kLd, bool kKRows>
struct TileCopier {
  static constexpr int kVec = kChunk / sizeof(T);
  static constexpr int kChunksPerRow = kCols / kVec;
  static constexpr int kRowsPerIter = kThreads / kChunksPerRow;
  static constexpr int kIters = kRows / kRowsPerIter;
  static_assert(kThreads % kChunksPerRow == 0 && kRows % kRowsPerIter == 0,
                "whole rows per pass");
  static_assert(kIters % kCopySteps == 0, "whole chunks per slice");
  static constexpr int kPerSlice = kIters / kCopySteps;
  static constexpr int kBK = kKRows ? kRows : kCols;
  // Shared bytes from one of a thread's chunks to the next.
  static constexpr uint32_t kRowBytes = kRowsPerIter * kLd * sizeof(T);

  const T* base;     // the operand (batch entry): the address of masked chunks
  const T* src;      // this thread's first chunk in the current k-tile
  int64_t row_step;  // elements from one of its chunks to the next
  int64_t k_step;    // elements from one k-tile to the next
  uint32_t dst;      // byte offset of its first chunk within the stage tile
  // Rows (kKRows: columns) of the fixed mn dimension left from this
  // thread's first chunk; and k left from its first chunk in the current
  // k-tile. A chunk is inside the matrix when both cover it.
  int mn_left;
  int k_left;

  // g: a rows x cols row-major matrix with leading dimension ld; the tile
  // starts at mn index mn0, k index 0.
  __device__ __forceinline__ TileCopier(const T* g, int64_t ld, int rows,
                                        int cols, int mn0, int tid) {
    const int row0 = tid / kChunksPerRow;
    const int col0 = (tid % kChunksPerRow) * kVec;
    base = g;
    row_step = kRowsPerIter * ld;
    dst = (row0 * kLd + col0) * sizeof(T);
    if constexpr (kKRows) {
      src = g + row0 * ld + mn0 + col0;
      k_step = kBK * ld;
      mn_left = cols - mn0 - col0;
      k_left = rows - row0;
    } else {
      src = g + (mn0 + row0) * ld + col0;
      k_step = kBK;
      mn_left = rows - mn0 - row0;
      k_left = cols - col0;
    }
  }

  // Slice `slice` (a constant after unrolling) of the current k-tile's
  // chunks into the stage tile at shared address stage.
  __device__ __forceinline__ void Copy(uint32_t stage, int slice) const {
#pragma unroll
    for (int i = 0; i < kPerSlice; ++i) {
      const int it = slice * kPerSlice + i;
      const bool in = kKRows ? it * kRowsPerIter < k_left && mn_left > 0
                             : it * kRowsPerIter < mn_left && k_left > 0;
      const T* p = src + it * row_step;
      // src-size 0 reads nothing and zero-fills.
      CpAsync<16>(stage + dst + it * kRowBytes, in ? p : base, in);
    }
  }

  // On to the next k-tile.
  __device__ __forceinline__ void Advance() {
    src += k_step;
    k_left -= kBK;
  }
};

template <typename T, bool kTransA, bool kTransB>
struct Copiers {
  using L = Smem<T, kTransA, kTransB>;
  // A: [m][k], or [k][m] when transposed; B: [k][n], or [n][k].
  using A = TileCopier<T, L::kRowsA, L::kColsA, L::kLdA, kTransA>;
  using B = TileCopier<T, L::kRowsB, L::kColsB, L::kLdB, !kTransB>;
};

// All A and B fragments of the warp's 64x64 sub-tile at k step kk.
template <typename T, bool kTransA, bool kTransB>
__device__ __forceinline__ void LoadFrags(uint32_t (&fa)[kTilesM][4],
                                          uint32_t (&fb)[kTilesN][2],
                                          const T* sa, const T* sb, int wm,
                                          int wn, int kk, int lane) {
  using L = Smem<T, kTransA, kTransB>;
#pragma unroll
  for (int im = 0; im < kTilesM; ++im) {
    LoadFragA<T, kTransA>(fa[im], sa, L::kLdA, wm + im * 16, kk, lane);
  }
#pragma unroll
  for (int jp = 0; jp < kTilesN / 2; ++jp) {
    LoadFragB<T, kTransB>(fb[2 * jp], fb[2 * jp + 1], sb, L::kLdB, wn + jp * 16,
                          kk, lane);
  }
}

template <typename T, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(kThreads, 1)
    GemmTensorCoreKernel(GemmParams p) {
  using L = Smem<T, kTransA, kTransB>;
  using CopierA = typename Copiers<T, kTransA, kTransB>::A;
  using CopierB = typename Copiers<T, kTransA, kTransB>::B;
  constexpr int kK = kMmaK<T>;
  constexpr int kSteps = L::kBK / kK;  // mma k steps per k-tile
  static_assert(kSteps == 4, "a k-tile is 4 mma k steps");
  static_assert(kCopySteps < kSteps, "copies committed before the barrier");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const uint32_t smem_base = SharedAddress(smem_raw);
  constexpr uint32_t kStageBytes = L::kStageElems * sizeof(T);
  constexpr uint32_t kBytesA = L::kElemsA * sizeof(T);
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int wm = (warp / kWarpsN) * kWarpM;  // the warp's 64 rows of the tile
  const int wn = (warp % kWarpsN) * kWarpN;  // and 64 columns
  const TileCoord tile = GroupedTile(blockIdx.x, p.tiles_m, p.tiles_n);
  const int i0 = tile.m * kBM;
  const int j0 = tile.n * kBN;
  const int k_tiles = (p.k + L::kBK - 1) / L::kBK;
  const int64_t batch = blockIdx.z;
  const T* a = static_cast<const T*>(p.a) + batch * p.stride_a;
  const T* b = static_cast<const T*>(p.b) + batch * p.stride_b;
  CopierA copy_a = kTransA ? CopierA(a, p.m, p.k, p.m, i0, tid)
                           : CopierA(a, p.k, p.m, p.k, i0, tid);
  CopierB copy_b = kTransB ? CopierB(b, p.k, p.n, p.k, j0, tid)
                           : CopierB(b, p.n, p.k, p.n, j0, tid);

  float acc[kTilesM][kTilesN][4];
#pragma unroll
  for (int im = 0; im < kTilesM; ++im) {
#pragma unroll
    for (int jn = 0; jn < kTilesN; ++jn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[im][jn][e] = 0.0f;
    }
  }

  // Prologue: k-tiles 0..kStages-2 in flight, one commit group each (empty
  // groups past the end keep the wait count uniform).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) {
#pragma unroll
      for (int slice = 0; slice < kCopySteps; ++slice) {
        copy_a.Copy(smem_base + s * kStageBytes, slice);
        copy_b.Copy(smem_base + s * kStageBytes + kBytesA, slice);
      }
    }
    copy_a.Advance();
    copy_b.Advance();
    CpAsyncCommit();
  }
  CpAsyncWait<kStages - 2>();
  __syncthreads();

  // Two fragment sets: k step s multiplies set s%2 while the loads of the
  // next step fill the other.
  uint32_t fa[2][kTilesM][4];
  uint32_t fb[2][kTilesN][2];
  int read = 0;             // stage of k-tile kt
  int write = kStages - 1;  // stage of k-tile kt + kStages - 1
  const T* sa = smem;
  LoadFrags<T, kTransA, kTransB>(fa[0], fb[0], sa, sa + L::kElemsA, wm, wn, 0,
                                 lane);

  for (int kt = 0; kt < k_tiles; ++kt) {
    const bool refill = kt + kStages - 1 < k_tiles;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      if (s == kSteps - 1) {
        // Tile kt+1's group is complete once at most kStages-2 are pending
        // (this iteration's was committed at step kCopySteps-1); the
        // barrier publishes every thread's copies, and retires this
        // iteration's fragment loads from tile kt's stage, which the next
        // iteration refills (tile kt+1's loads of that stage are all
        // issued after it). Past the last tile it only costs a barrier and
        // loads of stale, in-bounds shared memory.
        CpAsyncWait<kStages - 2>();
        __syncthreads();
        read = read + 1 == kStages ? 0 : read + 1;
        sa = smem + read * L::kStageElems;
      }
      LoadFrags<T, kTransA, kTransB>(fa[(s + 1) % 2], fb[(s + 1) % 2], sa,
                                     sa + L::kElemsA, wm, wn,
                                     ((s + 1) % kSteps) * kK, lane);
      if (s < kCopySteps) {
        if (refill) {
          const uint32_t stage = smem_base + write * kStageBytes;
          copy_a.Copy(stage, s);
          copy_b.Copy(stage + kBytesA, s);
        }
        if (s == kCopySteps - 1) {
          copy_a.Advance();
          copy_b.Advance();
          CpAsyncCommit();
          write = write + 1 == kStages ? 0 : write + 1;
        }
      }
#pragma unroll
      for (int im = 0; im < kTilesM; ++im) {
#pragma unroll
        for (int j = 0; j < kTilesN; ++j) {
          // Serpentine over n: consecutive mma share an A or a B fragment.
          const int jn = im % 2 == 0 ? j : kTilesN - 1 - j;
          Mma<T>(acc[im][jn], fa[s % 2][im], fb[s % 2][jn]);
        }
      }
    }
  }
  // Drain the (empty) trailing groups before the block exits.
  CpAsyncWait<0>();

  const int g = lane / 4;
  const int t = lane % 4;
#pragma unroll
  for (int im = 0; im < kTilesM; ++im) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = i0 + wm + im * 16 + g + 8 * h;
      if (i >= p.m) continue;
#pragma unroll
      for (int jn = 0; jn < kTilesN; ++jn) {
        const int j = j0 + wn + jn * 8 + 2 * t;
        // j is even: with n even, the lane's two columns are one aligned
        // pair (StoreGemmOutputPair).
        if (p.n % 2 == 0 && j + 1 < p.n) {
          StoreGemmOutputPair<T>(p, batch, i, j, acc[im][jn][2 * h],
                                 acc[im][jn][2 * h + 1]);
          continue;
        }
        if (j < p.n) StoreGemmOutput<T>(p, batch, i, j, acc[im][jn][2 * h]);
        if (j + 1 < p.n) {
          StoreGemmOutput<T>(p, batch, i, j + 1, acc[im][jn][2 * h + 1]);
        }
      }
    }
  }
}

template <typename T, bool kTransA, bool kTransB>
absl::Status LaunchTensorCore(const GemmParams& g, dim3 grid,
                              ExecContext& ctx) {
  constexpr int kBytes = Smem<T, kTransA, kTransB>::kBytes;
  auto* kernel = GemmTensorCoreKernel<T, kTransA, kTransB>;
  COALESCE_RETURN_IF_ERROR(AllowDynamicSharedMemory(kernel, kBytes));
  const dim3 block(kThreads);
  kernel<<<grid, block, kBytes, StreamOf(ctx)>>>(g);
  RecordLaunch(kernel, grid, block, kBytes, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchTensorCoreTyped(const GemmProblem& p, const GemmParams& g,
                                   ExecContext& ctx) {
  return ForEachBatchChunk(
      p, g, [&](const GemmParams& chunk, dim3 grid) -> absl::Status {
        if (!p.trans_a && !p.trans_b) {
          return LaunchTensorCore<T, false, false>(chunk, grid, ctx);
        }
        if (!p.trans_a && p.trans_b) {
          return LaunchTensorCore<T, false, true>(chunk, grid, ctx);
        }
        if (p.trans_a && !p.trans_b) {
          return LaunchTensorCore<T, true, false>(chunk, grid, ctx);
        }
        return LaunchTensorCore<T, true, true>(chunk, grid, ctx);
      });
}

// The largest stage set of any instantiation (both operands stored
// k-contiguous: [128] and [256] rows of 128 + 16 bytes).
constexpr int64_t kMaxSmemBytes = kStages * (kBM + kBN) * (kKBytes + kChunk);

class GemmTensorCoreVariant final
    : public TypedVariant<GemmProblem, OpKind::kGemm, BackendKind::kCuda> {
 public:
  absl::string_view name() const override { return kName; }
  absl::string_view description() const override {
    return "mma.sync tensor cores (f16/bf16 m16n8k16, TF32 m16n8k8), "
           "double-buffered ldmatrix fragments, 128x256 block tile of 64x64 "
           "warp tiles, 128-byte k-tiles, 3-stage cp.async pipeline, float32 "
           "accumulation";
  }

 protected:
  // float16/bfloat16, or float32 with allow_tf32; every row of A and B a
  // whole number of 16-byte chunks (CheckGemmVectorLayout with 16/sizeof(T)
  // elements: k % 8 == 0 for A [m,k] in 16 bits, and so on) and 16-byte
  // aligned A and B base pointers (checked in Run), for cp.async; compute
  // capability >= 8.0 (bf16 and TF32 mma.sync) and room for the 3-stage
  // buffers in the opt-in shared memory.
  absl::Status CanImplementTyped(const GemmProblem& p,
                                 const DeviceInfo& dev) const override {
    if (p.dtype == DType::kFloat32 && !p.allow_tf32) {
      return absl::UnimplementedError(
          "gemm.cuda.tensor_core: float32 needs allow_tf32 (it computes in "
          "TF32)");
    }
    if (dev.cc_major < 8) {
      return absl::UnimplementedError(
          "gemm.cuda.tensor_core: needs compute capability >= 8.0");
    }
    if (dev.shared_memory_per_block_optin_bytes < kMaxSmemBytes) {
      return absl::UnimplementedError(
          absl::StrCat("gemm.cuda.tensor_core: needs ", kMaxSmemBytes,
                       " bytes of shared memory per block, the device allows ",
                       dev.shared_memory_per_block_optin_bytes));
    }
    COALESCE_RETURN_IF_ERROR(CheckGemmCommon(kName, p, kBM, kBN));
    return CheckGemmVectorLayout(
        kName, p, static_cast<int>(kChunk / ElementSize(p.dtype)),
        "rows must be whole 16-byte cp.async chunks");
  }
  // One CTA per SM: its shared memory is more than half of an SM's.
  double Efficiency(const Problem& p, const DeviceInfo& dev) const override {
    const GemmProblem& g = std::get<GemmProblem>(p);
    return TensorEfficiency(g, kEfficiency) *
           TiledGemmFill(g, dev, kBM, kBN, 1);
  }
  // The roofline, or the waves of tiles one after another where that is
  // longer (short K: each wave's fixed latency).
  double EstimateSeconds(const Problem& p,
                         const DeviceInfo& dev) const override {
    return std::max(KernelVariant::EstimateSeconds(p, dev),
                    TensorWavesSeconds(std::get<GemmProblem>(p), dev, kBM, kBN,
                                       kWaveSeconds, kWavePeakFraction));
  }
  absl::Status RunTyped(const GemmProblem& p, const Operands& ops,
                        ExecContext& ctx) const override {
    COALESCE_RETURN_IF_ERROR(CheckGemmPointers(kName, ops, kChunk, false));
    const GemmParams g = MakeGemmParams(p, ops, kBM, kBN);
    return DispatchGemmDType(p.dtype, [&](auto tag) -> absl::Status {
      return LaunchTensorCoreTyped<decltype(tag)>(p, g, ctx);
    });
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeGemmTensorCoreVariant() {
  return std::make_unique<GemmTensorCoreVariant>();
}

}  // namespace coalesce::cuda
