// gemm.cuda.tensor_core: warp-level tensor-core GEMM (mma.sync) fed by a
// 3-stage cp.async pipeline; float16 and bfloat16 (m16n8k16), and float32
// as TF32 (m16n8k8) when the problem allows it. float32 accumulation.
//
// - Block tile 128x128, 8 warps as 2x4, each warp a 64x32 sub-tile: 4x4
//   mma tiles of 16x8, 64 accumulator registers per thread.
// - A k-tile is 128 bytes of k per row (64 16-bit elements or 32 floats):
//   with 64 bytes (and 4 stages) a barrier came every two m16n8k16 steps
//   and the kernel ran 292-300 TFLOP/s at 4096^3, with 128 it runs 327-332
//   (bench/results/h200/gemm-tensor-core-k128.json).
//   Operands are copied to shared memory verbatim, 16 bytes per cp.async,
//   in their stored orientation, and the fragment loads absorb transposes:
//   ldmatrix for k-contiguous tiles, ldmatrix.trans for 16-bit
//   mn-contiguous tiles, and plain 32-bit shared loads for float32
//   mn-contiguous tiles (ldmatrix.trans moves 16-bit units).
// - Every shared row is padded by 16 bytes: row pitches of 144, 272 or 528
//   bytes put the 8 row addresses of an ldmatrix phase in 8 different
//   16-byte bank groups, and the float32 mn-contiguous loads (address
//   4t*pitch + g for lane 4g+t, pitch 132 words) in 32 different banks.
// - Pipeline: the copies of k-tiles t+1..t+2 are in flight while tile t is
//   multiplied; one __syncthreads per k-tile. Chunks outside the matrix are
//   zero-filled through cp.async's src-size operand, so edge tiles need no
//   special path: each chunk is wholly inside or outside because rows are
//   multiples of 16 bytes (CanImplement).
// - Epilogue straight from the accumulator registers (the mma.sync C
//   layout is documented): alpha, beta*C, conversion to the output type.
//
// Register use (nvcc 13.0, sm_90, -Xptxas -v): 126-128 registers across the
// 12 instantiations, 8 of which spill 4-16 bytes; with 99-108 KB of dynamic
// shared memory,
// __launch_bounds__(256, 2) holds two blocks per SM. (A WMMA version of the
// same tiling needed 240-255 registers and spilled: WMMA's 16-bit
// fragments hold twice the registers mma.sync's do.)
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/core/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

constexpr char kName[] = "gemm.cuda.tensor_core";
constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kThreads = 256;
constexpr int kStages = 3;
constexpr int kKBytes = 128;  // bytes of k per shared row per stage
constexpr int kChunk = 16;    // bytes per cp.async
// A fraction of the 16-bit tensor peak (1070 TFLOP/s at 1980 MHz): 332 and
// 327 TFLOP/s at 4096^3 on the H200 in bfloat16 and float16
// (bench/results/h200/gemm-tensor-core-k128.json).
constexpr double kEfficiency = 0.31;

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

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src,
                                          bool in_bounds) {
  // src-size 0 reads nothing and zero-fills the 16 bytes.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(in_bounds ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

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

// Copies rows [r0, r0 + kRows) x columns [c0, c0 + kCols) of a row-major
// rows x cols matrix (leading dimension ld) into shared memory with a row
// pitch of kLd elements. Consecutive threads take consecutive 16-byte
// chunks of a row (coalesced); chunks outside the matrix are zero-filled.
template <typename T, int kRows, int kCols, int kLd>
__device__ __forceinline__ void LoadTile(T* smem, const T* g, int64_t ld,
                                         int rows, int cols, int r0, int c0,
                                         int tid) {
  constexpr int kVec = kChunk / sizeof(T);
  constexpr int kChunksPerRow = kCols / kVec;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int it = 0; it < kChunks / kThreads; ++it) {
    const int chunk = tid + it * kThreads;
    const int row = chunk / kChunksPerRow;
    const int col = (chunk % kChunksPerRow) * kVec;
    const bool in = r0 + row < rows && c0 + col < cols;
    const T* src = in ? g + static_cast<int64_t>(r0 + row) * ld + c0 + col : g;
    CpAsync16(SharedAddress(smem + row * kLd + col), src, in);
  }
}

template <typename T, bool kTransA, bool kTransB>
__device__ __forceinline__ void LoadStage(T* s, const T* a, const T* b,
                                          const GemmParams& p, int i0, int j0,
                                          int kt, int tid) {
  using L = Smem<T, kTransA, kTransB>;
  const int l0 = kt * L::kBK;
  T* sa = s;
  T* sb = s + L::kElemsA;
  if constexpr (!kTransA) {
    LoadTile<T, kBM, L::kBK, L::kLdA>(sa, a, p.k, p.m, p.k, i0, l0, tid);
  } else {
    LoadTile<T, L::kBK, kBM, L::kLdA>(sa, a, p.m, p.k, p.m, l0, i0, tid);
  }
  if constexpr (!kTransB) {
    LoadTile<T, L::kBK, kBN, L::kLdB>(sb, b, p.n, p.k, p.n, l0, j0, tid);
  } else {
    LoadTile<T, kBN, L::kBK, L::kLdB>(sb, b, p.k, p.n, p.k, j0, l0, tid);
  }
}

template <typename T, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(kThreads, 2)
    GemmTensorCoreKernel(GemmParams p) {
  using L = Smem<T, kTransA, kTransB>;
  constexpr int kK = kMmaK<T>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int wm = (warp / 4) * 64;  // the warp's 64 rows of the tile
  const int wn = (warp % 4) * 32;  // and 32 columns
  const TileCoord tile = GroupedTile(blockIdx.x, p.tiles_m, p.tiles_n);
  const int i0 = tile.m * kBM;
  const int j0 = tile.n * kBN;
  const int k_tiles = (p.k + L::kBK - 1) / L::kBK;
  const int64_t batch = blockIdx.z;
  const T* a = static_cast<const T*>(p.a) + batch * p.stride_a;
  const T* b = static_cast<const T*>(p.b) + batch * p.stride_b;

  float acc[4][4][4];
#pragma unroll
  for (int im = 0; im < 4; ++im) {
#pragma unroll
    for (int jn = 0; jn < 4; ++jn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[im][jn][e] = 0.0f;
    }
  }

  // Prologue: k-tiles 0..kStages-2 in flight, one commit group each (empty
  // groups past the end keep the wait count uniform).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) {
      LoadStage<T, kTransA, kTransB>(smem + s * L::kStageElems, a, b, p, i0, j0,
                                     s, tid);
    }
    CpAsyncCommit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    // Tile kt's group is complete once at most kStages-2 are pending; the
    // barrier publishes every thread's copies and also retires iteration
    // kt-1's reads of the stage refilled below.
    CpAsyncWait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < k_tiles) {
      LoadStage<T, kTransA, kTransB>(smem + (next % kStages) * L::kStageElems,
                                     a, b, p, i0, j0, next, tid);
    }
    CpAsyncCommit();

    const T* sa = smem + (kt % kStages) * L::kStageElems;
    const T* sb = sa + L::kElemsA;
#pragma unroll
    for (int kk = 0; kk < L::kBK; kk += kK) {
      uint32_t fa[4][4];
      uint32_t fb[4][2];
#pragma unroll
      for (int im = 0; im < 4; ++im) {
        LoadFragA<T, kTransA>(fa[im], sa, L::kLdA, wm + im * 16, kk, lane);
      }
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        LoadFragB<T, kTransB>(fb[2 * jp], fb[2 * jp + 1], sb, L::kLdB,
                              wn + jp * 16, kk, lane);
      }
#pragma unroll
      for (int im = 0; im < 4; ++im) {
#pragma unroll
        for (int jn = 0; jn < 4; ++jn) Mma<T>(acc[im][jn], fa[im], fb[jn]);
      }
    }
  }
  // Drain the (empty) trailing groups before the block exits.
  CpAsyncWait<0>();

  const int g = lane / 4;
  const int t = lane % 4;
#pragma unroll
  for (int im = 0; im < 4; ++im) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = i0 + wm + im * 16 + g + 8 * h;
      if (i >= p.m) continue;
#pragma unroll
      for (int jn = 0; jn < 4; ++jn) {
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
  // Above the default 48 KB a block needs the opt-in limit raised; the
  // attribute is per device context, so it is set on every launch (a host
  // call, legal during stream capture).
  COALESCE_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
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
// [128][64 bytes + 16]).
constexpr int64_t kMaxSmemBytes = kStages * 2 * kBM * (kKBytes + kChunk);

class GemmTensorCoreVariant final
    : public TypedVariant<GemmProblem, OpKind::kGemm, BackendKind::kCuda> {
 public:
  absl::string_view name() const override { return kName; }
  absl::string_view description() const override {
    return "mma.sync tensor cores (f16/bf16 m16n8k16, TF32 m16n8k8), "
           "ldmatrix fragments, 128x128x64 block tile, 3-stage cp.async "
           "pipeline, float32 accumulation";
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
  double Efficiency(const Problem& p, const DeviceInfo&) const override {
    return TensorEfficiency(std::get<GemmProblem>(p), kEfficiency);
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
