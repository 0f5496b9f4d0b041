// Device helpers shared by the gelu_layer_norm CUDA variants
// (gelu_ln_unfused.cu, gelu_ln_warp_per_row.cu, gelu_ln_block_per_row.cu):
// element access per dtype (16-byte packs, 16-bit types unpacked to float32
// in registers), the GELU formulas, warp and block sums, and the row routine
// of the fused kernels. All arithmetic is float32 whatever the storage type.
// Internal to kernels/cuda; stateless and thread-safe.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/core/problem.h"
#include "kernels/core/variant.h"

namespace coalesce::cuda::gelu_ln {

// One call's operands (device pointers, null when absent) and parameters.
struct Args {
  const void* x = nullptr;
  const void* bias = nullptr;
  const void* residual = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  void* y = nullptr;
  void* h = nullptr;  // the pre-norm output, null unless return_pre_norm
  int64_t rows = 0;
  int64_t hidden = 0;
  // 1 / hidden, rounded once on the host: the kernels multiply by it. An
  // IEEE division (or sqrtf) in a kernel has an out-of-line slow path, and
  // the call made ptxas spill the row's registers around it.
  float inv_hidden = 0;
  float eps = 0;
  bool use_tanh = false;  // selects the kernel instance, see Gelu
};

inline Args ArgsOf(const GeluLnProblem& p, const Operands& ops) {
  Args a;
  a.x = ops.inputs[kLnX];
  a.bias = p.has_bias ? ops.inputs[kLnBias] : nullptr;
  a.residual = p.has_residual ? ops.inputs[kLnResidual] : nullptr;
  a.gamma = p.has_gamma ? ops.inputs[kLnGamma] : nullptr;
  a.beta = p.has_beta ? ops.inputs[kLnBeta] : nullptr;
  a.y = ops.outputs[kLnY];
  a.h = p.return_pre_norm ? ops.outputs[kLnH] : nullptr;
  a.rows = p.rows;
  a.hidden = p.hidden;
  a.inv_hidden = static_cast<float>(1.0 / static_cast<double>(p.hidden));
  a.eps = p.eps;
  a.use_tanh = p.approx == GeluApprox::kTanh;
  return a;
}

// True when every row of every operand starts on a 16-byte boundary, so the
// fused kernels may move whole 16-byte packs: the row length in bytes is a
// multiple of 16 and every pointer is 16-byte aligned.
inline bool Vectorizable(const Args& a, DType t) {
  if (a.hidden * static_cast<int64_t>(ElementSize(t)) % 16 != 0) return false;
  for (const void* q :
       {a.x, a.bias, a.residual, a.gamma, a.beta, static_cast<const void*>(a.y),
        static_cast<const void*>(a.h)}) {
    if (reinterpret_cast<uintptr_t>(q) % 16 != 0) return false;
  }
  return true;
}

// ------------------------------------------------------------ element access

// Storage <-> float32 per dtype. kPack elements fill 16 bytes. Packs are
// read through the read-only path (__ldg: every input is read-only for the
// whole kernel) and written with __stwb, which keeps each store one 16-byte
// st.global.v4 (ptxas split a plain uint4 store into four 4-byte stores in
// transpose_vec16.cu).
struct F32Io {
  using T = float;
  static constexpr int kPack = 4;
  __device__ static float Load(const T* p) { return __ldg(p); }
  __device__ static void Store(T* p, float v) { *p = v; }
  __device__ static void LoadPack(const T* p, float (&v)[kPack]) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  }
  __device__ static void StorePack(T* p, const float (&v)[kPack]) {
    __stwb(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  }
};

struct HalfBits {
  __device__ static float ToFloat(uint16_t b) {
    return __half2float(__ushort_as_half(b));
  }
  __device__ static uint16_t FromFloat(float v) {
    return __half_as_ushort(__float2half_rn(v));
  }
};

struct BFloat16Bits {
  // bfloat16 is the top half of a float32: widening is a shift.
  __device__ static float ToFloat(uint16_t b) {
    return __uint_as_float(static_cast<uint32_t>(b) << 16);
  }
  __device__ static uint16_t FromFloat(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};

// The 16-bit types move as raw bits: eight elements per 16-byte pack, two
// per 32-bit word, element 2i in the low half of word i (little-endian, the
// order of the elements in memory).
template <typename Bits>
struct Bits16Io {
  using T = uint16_t;
  static constexpr int kPack = 8;
  __device__ static float Load(const T* p) { return Bits::ToFloat(__ldg(p)); }
  __device__ static void Store(T* p, float v) { *p = Bits::FromFloat(v); }
  __device__ static void LoadPack(const T* p, float (&v)[kPack]) {
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(p));
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = Bits::ToFloat(static_cast<uint16_t>(w[i] & 0xffffu));
      v[2 * i + 1] = Bits::ToFloat(static_cast<uint16_t>(w[i] >> 16));
    }
  }
  __device__ static void StorePack(T* p, const float (&v)[kPack]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = static_cast<uint32_t>(Bits::FromFloat(v[2 * i])) |
             (static_cast<uint32_t>(Bits::FromFloat(v[2 * i + 1])) << 16);
    }
    __stwb(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  }
};

using F16Io = Bits16Io<HalfBits>;
using BF16Io = Bits16Io<BFloat16Bits>;

// Calls f(F32Io{}), f(F16Io{}) or f(BF16Io{}) according to t.
template <typename F>
decltype(auto) DispatchIo(DType t, F&& f) {
  switch (t) {
    case DType::kFloat16:
      return f(F16Io{});
    case DType::kBFloat16:
      return f(BF16Io{});
    case DType::kFloat32:
      break;
  }
  return f(F32Io{});
}

// -------------------------------------------------------------------- GELU

// The textbook forms, 0.5 v (1 + erf(v / sqrt 2)) and 0.5 v (1 + tanh(z)),
// with the accurate (non-fast-math) erff and tanhf: about 20 instructions
// each and branch-free. The CPU backend's erfc and v / (1 + exp(-2z)) forms
// keep full relative precision in the negative tail, but erfcf and an IEEE
// division cost about twice as much, and a 16-bit row leaves only some 40
// instructions per element before the kernel stops being memory-bound.
// What the textbook forms lose is absolute: for v < -3, 1 + erf cancels to
// an error of about |v| 2^-24 (1e-7), far inside the 1e-5 atol of the
// conformance check.
__device__ __forceinline__ float GeluErf(float v) {
  return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__device__ __forceinline__ float GeluTanh(float v) {
  return 0.5f * v *
         (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
}

// The approximation is a template parameter: a run-time choice per element
// splits the row's code into branch regions that ptxas does not schedule
// loads across.
template <bool kTanh>
__device__ __forceinline__ float Gelu(float v) {
  return kTanh ? GeluTanh(v) : GeluErf(v);
}

// -------------------------------------------------------------- reductions

// Butterfly sum: every lane ends with the same bits, because each step adds
// the same two values in both partner lanes and float addition commutes.
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Sum over a block of kThreads threads, returned to every thread (with the
// same bits everywhere, as WarpSum). partial holds kThreads / 32 floats and
// must not be reused until every thread has returned: callers alternate two
// buffers, which the next call's __syncthreads separates.
template <int kThreads>
__device__ __forceinline__ float BlockSum(float v, float* partial) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31;
  v = WarpSum(v);
  if (lane == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  return WarpSum(lane < kWarps ? partial[lane] : 0.0f);
}

struct WarpReducer {
  __device__ float Sum(float v, int /*buffer*/) const { return WarpSum(v); }
};

template <int kThreads>
struct BlockReducer {
  float (*partial)[kThreads / 32];  // two buffers
  __device__ float Sum(float v, int buffer) const {
    return BlockSum<kThreads>(v, partial[buffer]);
  }
};

// ------------------------------------------------------- fused row routine

// A row is spread over kStride threads (a warp or a block); thread t holds
// kVecs slots of kPack elements in registers.
// - Vector layout: slot i is the 16-byte pack number i * kStride + t, so a
//   warp's accesses are 512 contiguous bytes. Needs hidden % kPack == 0,
//   which makes each pack wholly inside the row or wholly past it.
// - Scalar layout (rows not 16-byte aligned): element (i * kPack + k) *
//   kStride + t, so each scalar access of a warp is still contiguous.
// Either way element (i, k) of thread t is First(t) + Offset(i, k) with a
// compile-time Offset, so every access is one base register plus an
// immediate, and "inside the row" is Offset(i, k) < hidden - First(t): a
// compare with an immediate, cheap to recompute wherever it is needed.
template <int kPack, bool kVector, int kStride>
struct RowLayout {
  __device__ static int First(int t) { return kVector ? t * kPack : t; }
  __device__ static constexpr int Offset(int i, int k) {
    return kVector ? i * kStride * kPack + k : (i * kPack + k) * kStride;
  }
  // Whether element (i, k) is inside the row, limit = hidden - First(t).
  // Vector layout: per pack (limit is a multiple of kPack there).
  __device__ static bool Inside(int i, int k, int limit) {
    return Offset(i, kVector ? 0 : k) < limit;
  }
};

// Slot i of a row (p already advanced by First(t)) into v; elements past
// the row (Offset >= limit) get `absent`.
template <typename Io, bool kVector, int kStride>
__device__ __forceinline__ void LoadSlot(const typename Io::T* p, int i,
                                         int limit, float absent,
                                         float (&v)[Io::kPack]) {
  constexpr int kPack = Io::kPack;
  using L = RowLayout<kPack, kVector, kStride>;
  if constexpr (kVector) {
    if (L::Inside(i, 0, limit)) {
      Io::LoadPack(p + L::Offset(i, 0), v);
    } else {
#pragma unroll
      for (int k = 0; k < kPack; ++k) v[k] = absent;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      v[k] = L::Inside(i, k, limit) ? Io::Load(p + L::Offset(i, k)) : absent;
    }
  }
}

template <typename Io, bool kVector, int kStride>
__device__ __forceinline__ void StoreSlot(typename Io::T* p, int i, int limit,
                                          const float (&v)[Io::kPack]) {
  constexpr int kPack = Io::kPack;
  using L = RowLayout<kPack, kVector, kStride>;
  if constexpr (kVector) {
    if (L::Inside(i, 0, limit)) Io::StorePack(p + L::Offset(i, 0), v);
  } else {
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      if (L::Inside(i, k, limit)) Io::Store(p + L::Offset(i, k), v[k]);
    }
  }
}

// One row of the fused op by kStride cooperating threads (t is this thread's
// index among them), the row held in registers: global memory is read once
// (x, residual; bias, gamma and beta are small and come from cache) and
// written once (y, and h when requested). Mean and variance are two exact
// passes over the registers, never E[h^2] - E[h]^2, which cancels for rows
// whose mean is large against their spread. Every load of x, bias and
// residual comes before the first GELU, in loops of their own: with the
// residual loaded inside the GELU loop ptxas issued it one pack at a time,
// a memory latency per pack. reduce.Sum(v, buffer) sums over the kStride
// threads. Requires hidden <= kVecs * kPack * kStride.
template <typename Io, int kVecs, bool kVector, bool kTanh, int kStride,
          typename Reducer>
__device__ __forceinline__ void GeluLnRow(const Args& a, int64_t row, int t,
                                          const Reducer& reduce) {
  using T = typename Io::T;
  constexpr int kPack = Io::kPack;
  using L = RowLayout<kPack, kVector, kStride>;
  const int hidden = static_cast<int>(a.hidden);
  const int first = L::First(t);
  const int limit = hidden - first;  // <= 0 when t holds nothing
  const int64_t offset = row * a.hidden + first;
  const T* bias = static_cast<const T*>(a.bias);
  const T* residual = static_cast<const T*>(a.residual);
  const T* gamma = static_cast<const T*>(a.gamma);
  const T* beta = static_cast<const T*>(a.beta);

  // h = gelu(x + bias) + residual; elements past the row stay exactly 0.
  float v[kVecs][kPack];
  float r[kVecs][kPack];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    LoadSlot<Io, kVector, kStride>(static_cast<const T*>(a.x) + offset, i,
                                   limit, 0.0f, v[i]);
  }
  if (bias != nullptr) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      float b[kPack];
      LoadSlot<Io, kVector, kStride>(bias + first, i, limit, 0.0f, b);
#pragma unroll
      for (int k = 0; k < kPack; ++k) v[i][k] += b[k];
    }
  }
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    if (residual != nullptr) {
      LoadSlot<Io, kVector, kStride>(residual + offset, i, limit, 0.0f, r[i]);
    } else {
#pragma unroll
      for (int k = 0; k < kPack; ++k) r[i][k] = 0.0f;
    }
  }
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      if (L::Inside(i, k, limit)) v[i][k] = Gelu<kTanh>(v[i][k]) + r[i][k];
    }
  }
  if (a.h != nullptr) {
    T* h = static_cast<T*>(a.h) + offset;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      StoreSlot<Io, kVector, kStride>(h, i, limit, v[i]);
    }
  }

  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
#pragma unroll
    for (int k = 0; k < kPack; ++k) sum += v[i][k];
  }
  const float mean = reduce.Sum(sum, 0) * a.inv_hidden;

  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      if (L::Inside(i, k, limit)) {
        const float d = v[i][k] - mean;
        squares += d * d;
      }
    }
  }
  const float var = reduce.Sum(squares, 1) * a.inv_hidden;
  // rsqrtf: MUFU.RSQ, 2 ulp, no slow-path call (see inv_hidden).
  const float rstd = rsqrtf(var + a.eps);

#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
#pragma unroll
    for (int k = 0; k < kPack; ++k) v[i][k] = (v[i][k] - mean) * rstd;
  }
  if (gamma != nullptr) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      float g[kPack];
      LoadSlot<Io, kVector, kStride>(gamma + first, i, limit, 1.0f, g);
#pragma unroll
      for (int k = 0; k < kPack; ++k) v[i][k] *= g[k];
    }
  }
  if (beta != nullptr) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      float b[kPack];
      LoadSlot<Io, kVector, kStride>(beta + first, i, limit, 0.0f, b);
#pragma unroll
      for (int k = 0; k < kPack; ++k) v[i][k] += b[k];
    }
  }
  T* y = static_cast<T*>(a.y) + offset;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    StoreSlot<Io, kVector, kStride>(y, i, limit, v[i]);
  }
}

}  // namespace coalesce::cuda::gelu_ln
