// Device-side pieces shared by the CUDA GEMM kernels (gemm/*.cu): the
// kernel parameter block, element access to op(A) and op(B), float32
// conversions of the three dtypes, the alpha/beta epilogue, the tile
// raster, and the dtype dispatch of the launchers. Internal to kernels/cuda.
//
// Conventions every kernel follows (see GemmProblem): row-major A [m,k]
// ([k,m] when trans_a), B [k,n] ([n,k] when trans_b), C and D [m,n];
// batch entry b of an operand starts stride_* elements after entry b-1
// (0 broadcasts one matrix); D's entries are dense (m*n apart). Products
// accumulate in float32. C is read only when has_c and beta != 0 (BLAS
// semantics: beta == 0 ignores C, NaNs included).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/problem.h"
#include "kernels/core/variant.h"
#include "kernels/cuda/gemm/common.h"
#include "kernels/cuda/runtime/async_copy.cuh"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/launch.h"

namespace coalesce::cuda {

// Everything a GEMM kernel needs, passed by value (a few dozen bytes of
// kernel parameters).
struct GemmParams {
  const void* a;
  const void* b;
  const void* c;  // null unless read_c
  void* d;
  int m, n, k;
  int tiles_m, tiles_n;                  // output tiles of the launching kernel
  int64_t stride_a, stride_b, stride_c;  // elements; 0 broadcasts
  float alpha, beta;
  bool read_c;
};

inline GemmParams MakeGemmParams(const GemmProblem& p, const Operands& ops,
                                 int tile_m, int tile_n) {
  GemmParams g;
  g.read_c = p.has_c && p.beta != 0.0f;
  g.a = ops.inputs[kGemmA];
  g.b = ops.inputs[kGemmB];
  g.c = g.read_c ? ops.inputs[kGemmC] : nullptr;
  g.d = ops.outputs[kGemmD];
  g.m = static_cast<int>(p.m);
  g.n = static_cast<int>(p.n);
  g.k = static_cast<int>(p.k);
  g.tiles_m = static_cast<int>((p.m + tile_m - 1) / tile_m);
  g.tiles_n = static_cast<int>((p.n + tile_n - 1) / tile_n);
  // A batch of one never advances, whatever its stride says.
  g.stride_a = p.batch > 1 ? p.stride_a : 0;
  g.stride_b = p.batch > 1 ? p.stride_b : 0;
  g.stride_c = p.batch > 1 ? p.stride_c : 0;
  g.alpha = p.alpha;
  g.beta = p.beta;
  return g;
}

// Runs launch(chunk, grid) once per run of at most kMaxGridZ batch entries
// (gridDim.z's limit), with chunk's pointers advanced to the run's first
// entry and grid = (tiles, 1, entries). Kernels take their batch entry
// from blockIdx.z alone: an in-kernel batch loop kept the main loop's state
// live across iterations and made ptxas spill.
template <typename F>
absl::Status ForEachBatchChunk(const GemmProblem& p, const GemmParams& g,
                               F&& launch) {
  const int64_t es = static_cast<int64_t>(ElementSize(p.dtype));
  const unsigned tiles = static_cast<unsigned>(int64_t{g.tiles_m} * g.tiles_n);
  for (int64_t b0 = 0; b0 < p.batch; b0 += kMaxGridZ) {
    GemmParams chunk = g;
    chunk.a = static_cast<const char*>(g.a) + b0 * g.stride_a * es;
    chunk.b = static_cast<const char*>(g.b) + b0 * g.stride_b * es;
    if (g.c != nullptr) {
      chunk.c = static_cast<const char*>(g.c) + b0 * g.stride_c * es;
    }
    chunk.d = static_cast<char*>(g.d) + b0 * int64_t{g.m} * g.n * es;
    const dim3 grid(tiles, 1,
                    static_cast<unsigned>(std::min(p.batch - b0, kMaxGridZ)));
    absl::Status s = launch(chunk, grid);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Round to nearest even, as the CPU reference's conversions do.
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Element (i, l) of op(A) and (l, j) of op(B) within one batch entry.
template <typename T>
__device__ __forceinline__ float LoadOpA(const T* a, bool trans, int m, int k,
                                         int i, int l) {
  return ToFloat(trans ? a[static_cast<int64_t>(l) * m + i]
                       : a[static_cast<int64_t>(i) * k + l]);
}
template <typename T>
__device__ __forceinline__ float LoadOpB(const T* b, bool trans, int n, int k,
                                         int l, int j) {
  return ToFloat(trans ? b[static_cast<int64_t>(j) * k + l]
                       : b[static_cast<int64_t>(l) * n + j]);
}

// D[batch][i][j] = alpha * acc + beta * C[batch][i][j], rounded to T. The
// caller has checked i < m and j < n.
template <typename T>
__device__ __forceinline__ float GemmOutputValue(const GemmParams& p,
                                                 int64_t batch, int64_t idx,
                                                 float acc) {
  float v = p.alpha * acc;
  if (p.read_c) {
    const T* c = static_cast<const T*>(p.c) + batch * p.stride_c;
    v = fmaf(p.beta, ToFloat(c[idx]), v);
  }
  return v;
}
template <typename T>
__device__ __forceinline__ void StoreGemmOutput(const GemmParams& p,
                                                int64_t batch, int i, int j,
                                                float acc) {
  const int64_t idx = static_cast<int64_t>(i) * p.n + j;
  T* d = static_cast<T*>(p.d) + batch * static_cast<int64_t>(p.m) * p.n;
  d[idx] = FromFloat<T>(GemmOutputValue<T>(p, batch, idx, acc));
}

// Two adjacent elements, rounded as FromFloat does, in one store.
__device__ __forceinline__ void StorePair(float* d, float a, float b) {
  *reinterpret_cast<float2*>(d) = make_float2(a, b);
}
__device__ __forceinline__ void StorePair(__half* d, float a, float b) {
  *reinterpret_cast<__half2*>(d) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ void StorePair(__nv_bfloat16* d, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(d) = __floats2bfloat162_rn(a, b);
}

// D[i][j] and D[i][j+1] as StoreGemmOutput computes them, in one store (one
// 4-byte store of two 16-bit elements instead of two 2-byte ones). The
// caller has checked i < m and j + 1 < n, and that n and j are even: with
// D's base 16-byte aligned, the pair is then aligned.
template <typename T>
__device__ __forceinline__ void StoreGemmOutputPair(const GemmParams& p,
                                                    int64_t batch, int i, int j,
                                                    float acc0, float acc1) {
  const int64_t idx = static_cast<int64_t>(i) * p.n + j;
  T* d = static_cast<T*>(p.d) + batch * static_cast<int64_t>(p.m) * p.n;
  StorePair(d + idx, GemmOutputValue<T>(p, batch, idx, acc0),
            GemmOutputValue<T>(p, batch, idx + 1, acc1));
}

struct TileCoord {
  int m;  // tile row
  int n;  // tile column
};

// Triton's grouped ordering: blocks walk down groups of kGroupM tile rows
// before moving right, so blocks resident together share B's column panels
// and a few of A's row panels in L2 instead of streaming all of B per tile
// row.
__device__ __forceinline__ TileCoord GroupedTile(int64_t block, int tiles_m,
                                                 int tiles_n) {
  constexpr int kGroupM = 8;
  const int64_t per_group = int64_t{kGroupM} * tiles_n;
  const int first_m = static_cast<int>(block / per_group) * kGroupM;
  const int group_m = min(tiles_m - first_m, kGroupM);
  const int in_group = static_cast<int>(block % per_group);
  return {first_m + in_group % group_m, in_group / group_m};
}

// Calls f(T{}) with T the element type of dt: float, __half or
// __nv_bfloat16.
template <typename F>
absl::Status DispatchGemmDType(DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat16:
      return f(__half{});
    case DType::kBFloat16:
      return f(__nv_bfloat16{});
  }
  return absl::InvalidArgumentError("unknown dtype");
}

// A SIMT GEMM variant whose only moving part is its kernel: one launch per
// batch chunk of Traits::kTile x Traits::kTile output tiles on a block of
// kTile x kBlockRows threads. Traits provides kName, kDescription, kTile,
// kBlockRows, kCost (a SimtGemmCost, for SimtGemmSeconds), and `template
// <typename T> static constexpr auto Kernel()` returning the __global__
// function for element type T, taking the chunk's GemmParams and the two
// transpose flags (a function: nvcc warned (#114-D) that a variable template
// member holding the pointer was referenced but not defined).
// gemm.cuda.naive and gemm.cuda.smem_tiled are two of these.
template <typename Traits>
class SimtGemmVariant final
    : public TypedVariant<GemmProblem, OpKind::kGemm, BackendKind::kCuda> {
 public:
  absl::string_view name() const override { return Traits::kName; }
  absl::string_view description() const override {
    return Traits::kDescription;
  }

 protected:
  absl::Status CanImplementTyped(const GemmProblem& p,
                                 const DeviceInfo&) const override {
    return CheckGemmCommon(Traits::kName, p, Traits::kTile, Traits::kTile);
  }
  double Efficiency(const Problem& p, const DeviceInfo& dev) const override {
    return SimtEfficiency(std::get<GemmProblem>(p), dev,
                          Traits::kCost.efficiency);
  }
  double EstimateSeconds(const Problem& p,
                         const DeviceInfo& dev) const override {
    return SimtGemmSeconds(std::get<GemmProblem>(p), dev, Traits::kCost);
  }
  absl::Status RunTyped(const GemmProblem& p, const Operands& ops,
                        ExecContext& ctx) const override {
    const GemmParams g = MakeGemmParams(p, ops, Traits::kTile, Traits::kTile);
    return DispatchGemmDType(p.dtype, [&](auto tag) -> absl::Status {
      using T = decltype(tag);
      auto* kernel = Traits::template Kernel<T>();
      return ForEachBatchChunk(
          p, g, [&](const GemmParams& chunk, dim3 grid) -> absl::Status {
            const dim3 block(Traits::kTile, Traits::kBlockRows);
            kernel<<<grid, block, 0, StreamOf(ctx)>>>(chunk, p.trans_a,
                                                      p.trans_b);
            RecordLaunch(kernel, grid, block, 0, ctx);
            COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
            return absl::OkStatus();
          });
    });
  }
};

}  // namespace coalesce::cuda
