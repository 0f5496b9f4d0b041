// gemm.cuda.reg_tiled: float32 SIMT GEMM with 2-D register blocking, the
// classic structure of hand-written SGEMMs before tensor cores.
//
// - Block tile 128x128, k-tile 16, 256 threads; each thread accumulates an
//   8x8 sub-tile in registers: per k step it reads 8 values of op(A) and 8
//   of op(B) from shared memory (four 16-byte loads) for 64 FMAs.
// - A thread's rows are {4ty..4ty+3} and {64+4ty..64+4ty+3} (columns
//   likewise with tx), not 8 consecutive ones, and each warp owns a 4x8
//   block of (ty, tx): rows 16*(w/2).. and columns 32*(w%2).. of each
//   64x64 quadrant. A warp's fragment read then covers 4 consecutive
//   float4s of an A row (64 bytes) and 8 of a B row (128 bytes): one
//   shared-memory wavefront per 16-byte load.
// - Shared memory holds both operands k-major, as[k][i] and bs[k][j]
//   (op(A) stored transposed), so the product loop reads rows. Rows are
//   padded by 4 floats: the transposed scalar stores of a k-contiguous
//   operand (16 rows per warp, each written at k and k+4 by a thread pair)
//   then land in 32 distinct banks instead of 2-way conflicts, and rows
//   stay 16-byte aligned for the float4 reads.
// - Global loads come in rounds of 8 k (two per k-tile): one 4-element
//   vector of A and one of B per thread per round, 16-byte loads when the
//   layout allows (kVec), else four scalar loads at the same positions;
//   out-of-range elements are zero-filled.
// - Double buffering: while tile k is multiplied out of shared memory,
//   tile k+1 goes into the other shared buffer. An mn-contiguous operand
//   (A transposed, B not transposed) is copied there with cp.async (16
//   bytes per thread per round, or four 4-byte copies on the scalar path;
//   zero-filled out of range), both rounds issued at the start of the
//   tile and waited for before its barrier. A k-contiguous operand goes
//   through registers one round at a time (the first round stored after
//   8 k steps, the second after 16), so at most two float4s are staged;
//   one __syncthreads per 16-wide k-tile.
//
// Register use (nvcc 13.0, sm_90, -Xptxas -v): 122-128 registers across the
// 8 instantiations, no spills, 33792 bytes of static shared memory, so
// __launch_bounds__(256, 2) holds two blocks (16 warps) per SM. Batch
// entries come from blockIdx.z and sizes are re-read from the parameters
// (TileLoader), and the last iteration's loads stay guarded: each of these
// keeps the kernel under that cap without spilling.
//
// On the H200: 2772 us at 4096^3 (49.6 TFLOP/s, 0.97 of cuBLASLt) and
// 22167 us at 8192^3 (0.97): `coalesce-bench kernels --ops=gemm
// --dtypes=float32 --shape=1,4096,4096,4096 --variants=reg_tiled,cublaslt`.
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/gemm/common.cuh"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

constexpr char kName[] = "gemm.cuda.reg_tiled";
constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kBK = 16;    // k per shared tile (one barrier per tile)
constexpr int kLoadK = 8;  // k per global load round (two per tile)
constexpr int kThreads = 256;
constexpr int kPad = 4;
// The cost model (SimtGemmSeconds), fitted to this kernel's times in the
// H200 sweeps' seed-7 float32 shapes of every class (kernels/cuda/testdata/
// gemm_classes_seed7.txt, 600 shapes: relative least squares with the
// efficiency held at its measured value): the model's median error there
// 14% -> 8.8%, on seed 8 14% -> 8.4%.
constexpr SimtGemmCost kCost = {
    kBM, kBN, kBM, kBN,
    8,  // K per step of the model (step_seconds is per 8 k)
    // 0.97 of cuBLASLt's 51.3 TFLOP/s at 4096^3 on the H200, of the fp32
    // peak's 66.9.
    0.74,
    // Set-up beyond a launch.
    2.15e-6,
    // Per 8 k of one block's K loop.
    0.68e-6,
    // The K loop's double buffering hides HBM as well as L2.
    0,
    // Per block and SM.
    1.1e-6,
    // B transposed: staged through the tile, no cost of its own.
    0,
    // Per byte of D: 16-byte stores 0.18 us per MB, scalar ones (N not a
    // multiple of 4) 0.97, which short K leaves exposed (batch 30 of
    // 110x806x6: 20.5 us where cuBLASLt took 10.6).
    0.18e-12, 0.97e-12};

// One thread's share of one load round (kLoadK = 8 k, half a k-tile) of a
// k-contiguous operand (A not transposed, B transposed: [mn, k]): four
// consecutive k of one row. The round is 128 rows x 8 k; thread t loads
// row t/2, k offset 4*(t%2), and stores the vector transposed (4 scalar
// stores). Sizes are re-read from the kernel parameters (constant bank)
// rather than held in registers; the loader walks K in order, advancing
// its pointer one round per Next().
template <bool kVec>
struct TileLoader {
  const float* ptr;  // this thread's vector in the next round
  int mn;            // its row
  int l;             // k of its first element in the next round

  __device__ __forceinline__ TileLoader(const float* base, int mn0, int,
                                        int k_sz, int tid) {
    mn = mn0 + tid / 2;
    l = 4 * (tid % 2);
    ptr = base + static_cast<int64_t>(mn) * k_sz + l;
  }

  // The vector of the next load round (zero outside the matrix); advances
  // to the round after it.
  __device__ __forceinline__ float4 Next(int mn_sz, int k_sz) {
    const float4 v = Load(mn_sz, k_sz);
    ptr += kLoadK;
    l += kLoadK;
    return v;
  }

  __device__ __forceinline__ float4 Load(int mn_sz, int k_sz) const {
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (mn < mn_sz) {
      if constexpr (kVec) {
        // k % 4 == 0: the vector is wholly inside or outside.
        if (l < k_sz) return __ldg(reinterpret_cast<const float4*>(ptr));
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (l + e < k_sz) v[e] = __ldg(ptr + e);
        }
      }
    }
    return make_float4(v[0], v[1], v[2], v[3]);
  }

  // Stores the vector into s[k][mn] (k-major; s points at the load
  // round's first k-row of the tile), tid as in the constructor.
  __device__ __forceinline__ static void Store(float (*s)[kBM + kPad], float4 v,
                                               int tid) {
    const int row = tid / 2;
    const int k = 4 * (tid % 2);
    s[k + 0][row] = v.x;
    s[k + 1][row] = v.y;
    s[k + 2][row] = v.z;
    s[k + 3][row] = v.w;
  }
};

// An mn-contiguous operand ([k, mn]: A transposed, B not transposed)
// copied straight into the k-major shared tile with cp.async: the round
// is 8 k-rows x 128, thread t copies k-row t/32, mn offset 4*(t%32), no
// registers staged.
template <bool kVec>
struct AsyncTileLoader {
  const float* ptr;  // this thread's vector in the next round
  int mn;            // first column of the vector
  int l;             // k-row of the vector in the next round

  __device__ __forceinline__ AsyncTileLoader(const float* base, int mn0,
                                             int mn_sz, int, int tid) {
    mn = mn0 + 4 * (tid % 32);
    l = tid / 32;
    ptr = base + static_cast<int64_t>(l) * mn_sz + mn;
  }

  // Issues the copies of the next round into s (the round's first k-row
  // of the tile) and advances to the round after it.
  __device__ __forceinline__ void Issue(float (*s)[kBM + kPad], int tid,
                                        int mn_sz, int k_sz) {
    const uint32_t dst = SharedAddress(&s[tid / 32][4 * (tid % 32)]);
    if constexpr (kVec) {
      // mn % 4 == 0: the vector is wholly inside or outside.
      CpAsync<16>(dst, ptr, l < k_sz && mn < mn_sz);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        CpAsync<4>(dst + 4 * e, ptr + e, l < k_sz && mn + e < mn_sz);
      }
    }
    ptr += static_cast<int64_t>(kLoadK) * mn_sz;
    l += kLoadK;
  }
};

static_assert(kBM == kBN, "TileLoader::Store assumes one tile pitch");

// The 8 op(A) values (rows 4ty..4ty+3, 64+4ty..) and 8 op(B) values
// (columns 4tx.., 64+4tx..) of one k step.
struct Frag {
  float4 a0, a1, b0, b1;
};

__device__ __forceinline__ Frag LoadFrag(const float (*as)[kBM + kPad],
                                         const float (*bs)[kBN + kPad], int kk,
                                         int tx, int ty) {
  Frag f;
  f.a0 = *reinterpret_cast<const float4*>(&as[kk][4 * ty]);
  f.a1 = *reinterpret_cast<const float4*>(&as[kk][64 + 4 * ty]);
  f.b0 = *reinterpret_cast<const float4*>(&bs[kk][4 * tx]);
  f.b1 = *reinterpret_cast<const float4*>(&bs[kk][64 + 4 * tx]);
  return f;
}

__device__ __forceinline__ void Fma8x8(float (&acc)[8][8], const Frag& f) {
  const float av[8] = {f.a0.x, f.a0.y, f.a0.z, f.a0.w,
                       f.a1.x, f.a1.y, f.a1.z, f.a1.w};
  const float bv[8] = {f.b0.x, f.b0.y, f.b0.z, f.b0.w,
                       f.b1.x, f.b1.y, f.b1.z, f.b1.w};
#pragma unroll
  for (int r = 0; r < 8; ++r) {
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
  }
}

template <bool kTransA, bool kTransB, bool kVec>
__global__ void __launch_bounds__(kThreads, 2)
    GemmRegTiledKernel(GemmParams p, bool vec_out) {
  // op(A) is k-contiguous unless A is transposed; op(B) only when B is.
  // An mn-contiguous operand (A transposed, B not) goes to shared memory
  // by cp.async; a k-contiguous one through registers (transposed stores).
  constexpr bool kAsyncA = kTransA;
  constexpr bool kAsyncB = !kTransB;
  using LoaderA =
      std::conditional_t<kAsyncA, AsyncTileLoader<kVec>, TileLoader<kVec>>;
  using LoaderB =
      std::conditional_t<kAsyncB, AsyncTileLoader<kVec>, TileLoader<kVec>>;
  __shared__ __align__(16) float as[2][kBK][kBM + kPad];
  __shared__ __align__(16) float bs[2][kBK][kBN + kPad];
  const int tid = threadIdx.x;
  // Warp w owns rows 16*(w/2)..+15 and 64+16*(w/2)..+15 and columns
  // 32*(w%2)..+31 and 64+32*(w%2)..+31 (2x2 sub-tiles of 16x32); its lanes
  // form a 4x8 grid in each. A fragment read of a warp then touches 4
  // consecutive float4s of an A row and 8 of a B row: one 128-byte shared
  // wavefront each.
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int ty = 4 * (warp / 2) + lane / 8;
  const int tx = 8 * (warp % 2) + lane % 8;
  const TileCoord t = GroupedTile(blockIdx.x, p.tiles_m, p.tiles_n);
  const int i0 = t.m * kBM;
  const int j0 = t.n * kBN;
  const int k_tiles = (p.k + kBK - 1) / kBK;

  const int64_t b = blockIdx.z;
  LoaderA la(static_cast<const float*>(p.a) + b * p.stride_a, i0, p.m, p.k,
             tid);
  LoaderB lb(static_cast<const float*>(p.b) + b * p.stride_b, j0, p.n, p.k,
             tid);

  float acc[8][8];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[r][c] = 0.0f;
  }

#pragma unroll
  for (int h = 0; h < kBK / kLoadK; ++h) {
    if constexpr (kAsyncA) {
      la.Issue(as[0] + h * kLoadK, tid, p.m, p.k);
    } else {
      LoaderA::Store(as[0] + h * kLoadK, la.Next(p.m, p.k), tid);
    }
    if constexpr (kAsyncB) {
      lb.Issue(bs[0] + h * kLoadK, tid, p.n, p.k);
    } else {
      LoaderB::Store(bs[0] + h * kLoadK, lb.Next(p.n, p.k), tid);
    }
  }
  if constexpr (kAsyncA || kAsyncB) {
    CpAsyncCommit();
    CpAsyncWait<0>();
  }
  __syncthreads();

  for (int kt = 0; kt < k_tiles; ++kt) {
    const int cur = kt & 1;
    // Tile kt+1 goes into the other buffer in two rounds of 8 k, each
    // loaded into registers before 8 k steps of FMAs (512 per thread) and
    // stored after them: two float4s of staging instead of four. The other
    // buffer was last read in iteration kt-1, which every thread finished
    // before the barrier that ended it. In the last iteration nothing is
    // loaded and the stores write zeros to a buffer nobody reads.
    const bool more = kt + 1 < k_tiles;
    // The cp.async operands' whole tile kt+1 is in flight during all 16
    // k steps; the barrier below follows a wait for it.
    if constexpr (kAsyncA || kAsyncB) {
      if (more) {
#pragma unroll
        for (int h = 0; h < kBK / kLoadK; ++h) {
          if constexpr (kAsyncA) {
            la.Issue(as[cur ^ 1] + h * kLoadK, tid, p.m, p.k);
          }
          if constexpr (kAsyncB) {
            lb.Issue(bs[cur ^ 1] + h * kLoadK, tid, p.n, p.k);
          }
        }
      }
      CpAsyncCommit();
    }
    float4 next_a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 next_b = next_a;
    if (more) {
      if constexpr (!kAsyncA) next_a = la.Next(p.m, p.k);
      if constexpr (!kAsyncB) next_b = lb.Next(p.n, p.k);
    }
    // Fragments double-buffered in registers: step kk+1's shared loads
    // are issued before step kk's FMAs.
    Frag f[2];
    f[0] = LoadFrag(as[cur], bs[cur], 0, tx, ty);
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      if (kk + 1 < kBK) {
        f[(kk + 1) & 1] = LoadFrag(as[cur], bs[cur], kk + 1, tx, ty);
      }
      Fma8x8(acc, f[kk & 1]);
      if (kk % kLoadK == kLoadK - 1) {
        if constexpr (!kAsyncA) {
          LoaderA::Store(as[cur ^ 1] + (kk + 1 - kLoadK), next_a, tid);
          if (kk + 1 < kBK && more) next_a = la.Next(p.m, p.k);
        }
        if constexpr (!kAsyncB) {
          LoaderB::Store(bs[cur ^ 1] + (kk + 1 - kLoadK), next_b, tid);
          if (kk + 1 < kBK && more) next_b = lb.Next(p.n, p.k);
        }
      }
    }
    if constexpr (kAsyncA || kAsyncB) CpAsyncWait<0>();
    __syncthreads();
  }

  // Epilogue: per row, two groups of 4 consecutive columns; float4
  // stores (and C loads) when n % 4 == 0 and the pointers allow
  // (vec_out), else element by element.
  float* d = static_cast<float*>(p.d) + b * static_cast<int64_t>(p.m) * p.n;
  const float* c =
      p.read_c ? static_cast<const float*>(p.c) + b * p.stride_c : nullptr;
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int i = i0 + (r < 4 ? 4 * ty + r : 64 + 4 * ty + r - 4);
    if (i >= p.m) continue;
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int j = j0 + 64 * g + 4 * tx;
      const int64_t idx = static_cast<int64_t>(i) * p.n + j;
      if (vec_out) {
        if (j >= p.n) continue;  // n % 4 == 0: wholly inside or outside
        float4 v = make_float4(
            p.alpha * acc[r][4 * g + 0], p.alpha * acc[r][4 * g + 1],
            p.alpha * acc[r][4 * g + 2], p.alpha * acc[r][4 * g + 3]);
        if (c != nullptr) {
          const float4 cv = __ldg(reinterpret_cast<const float4*>(c + idx));
          v.x = fmaf(p.beta, cv.x, v.x);
          v.y = fmaf(p.beta, cv.y, v.y);
          v.z = fmaf(p.beta, cv.z, v.z);
          v.w = fmaf(p.beta, cv.w, v.w);
        }
        *reinterpret_cast<float4*>(d + idx) = v;
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if (j + q < p.n) {
            StoreGemmOutput<float>(p, b, i, j + q, acc[r][4 * g + q]);
          }
        }
      }
    }
  }
}

template <bool kTransA, bool kTransB>
absl::Status LaunchRegTiled(const GemmParams& g, dim3 grid, bool vec_in,
                            bool vec_out, ExecContext& ctx) {
  const dim3 block(kThreads);
  if (vec_in) {
    GemmRegTiledKernel<kTransA, kTransB, true>
        <<<grid, block, 0, StreamOf(ctx)>>>(g, vec_out);
    RecordLaunch(GemmRegTiledKernel<kTransA, kTransB, true>, grid, block, 0,
                 ctx);
  } else {
    GemmRegTiledKernel<kTransA, kTransB, false>
        <<<grid, block, 0, StreamOf(ctx)>>>(g, vec_out);
    RecordLaunch(GemmRegTiledKernel<kTransA, kTransB, false>, grid, block, 0,
                 ctx);
  }
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

class GemmRegTiledVariant final
    : public TypedVariant<GemmProblem, OpKind::kGemm, BackendKind::kCuda> {
 public:
  absl::string_view name() const override { return kName; }
  absl::string_view description() const override {
    return "float32 SIMT: 128x128 block tile, 8x8 outputs per thread in "
           "registers, 16-byte loads, double-buffered k-major shared tiles";
  }

 protected:
  // float32 only, with or without allow_tf32 (it computes in full float32,
  // which TF32 permits). The 16-byte load path needs the vector layout of
  // CheckGemmVectorLayout (4 elements) and 16-byte aligned A and B; other
  // layouts run the same kernel with scalar loads, so they are accepted.
  absl::Status CanImplementTyped(const GemmProblem& p,
                                 const DeviceInfo&) const override {
    if (p.dtype != DType::kFloat32) {
      return absl::UnimplementedError(
          "gemm.cuda.reg_tiled: float32 only (16-bit types go to the tensor "
          "core variants)");
    }
    return CheckGemmCommon(kName, p, kBM, kBN);
  }
  double Efficiency(const Problem& p, const DeviceInfo& dev) const override {
    return SimtEfficiency(std::get<GemmProblem>(p), dev, kCost.efficiency);
  }
  double EstimateSeconds(const Problem& p,
                         const DeviceInfo& dev) const override {
    return SimtGemmSeconds(std::get<GemmProblem>(p), dev, kCost);
  }
  absl::Status RunTyped(const GemmProblem& p, const Operands& ops,
                        ExecContext& ctx) const override {
    const GemmParams g = MakeGemmParams(p, ops, kBM, kBN);
    const bool vec_in = CheckGemmVectorLayout(kName, p, 4, "").ok() &&
                        GemmPointersAligned(ops, 16);
    const bool vec_out = p.n % 4 == 0 && GemmPointersAligned(ops, 16) &&
                         (!g.read_c || g.stride_c % 4 == 0);
    return ForEachBatchChunk(
        p, g, [&](const GemmParams& chunk, dim3 grid) -> absl::Status {
          if (!p.trans_a && !p.trans_b) {
            return LaunchRegTiled<false, false>(chunk, grid, vec_in, vec_out,
                                                ctx);
          }
          if (!p.trans_a && p.trans_b) {
            return LaunchRegTiled<false, true>(chunk, grid, vec_in, vec_out,
                                               ctx);
          }
          if (p.trans_a && !p.trans_b) {
            return LaunchRegTiled<true, false>(chunk, grid, vec_in, vec_out,
                                               ctx);
          }
          return LaunchRegTiled<true, true>(chunk, grid, vec_in, vec_out, ctx);
        });
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeGemmRegTiledVariant() {
  return std::make_unique<GemmRegTiledVariant>();
}

}  // namespace coalesce::cuda
