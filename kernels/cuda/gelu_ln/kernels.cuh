// Device helpers shared by the gelu_layer_norm CUDA variants
// (gelu_ln/unfused.cu, warp_per_row.cu, block_per_row.cu):
// element access per dtype (16-byte packs, 16-bit types unpacked to float32
// in registers), the GELU formulas, warp and block sums, and the row routine
// of the fused kernels. All arithmetic is float32 whatever the storage type.
// Internal to kernels/cuda; stateless and thread-safe.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/core/problem.h"
#include "kernels/core/variant.h"
#include "kernels/cuda/runtime/async_copy.cuh"

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

// Whether rows of `hidden` elements of t are a whole number of 16-byte
// packs: what the vector path needs of the shape (the selection heuristics
// know no pointers).
inline bool WholePackRows(int64_t hidden, DType t) {
  return hidden * static_cast<int64_t>(ElementSize(t)) % 16 == 0;
}

// True when every row of every operand starts on a 16-byte boundary, so the
// fused kernels may move whole 16-byte packs: the row length in bytes is a
// multiple of 16 and every pointer is 16-byte aligned.
inline bool Vectorizable(const Args& a, DType t) {
  if (!WholePackRows(a.hidden, t)) return false;
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
// transpose/vec16.cu).
struct F32Io {
  using T = float;
  static constexpr int kPack = 4;
  static constexpr bool kRoundsTo16Bits = false;
  __device__ static float Load(const T* p) { return __ldg(p); }
  __device__ static void Store(T* p, float v) { *p = v; }
  __device__ static void Unpack(uint4 q, float (&v)[kPack]) {
    v[0] = __uint_as_float(q.x);
    v[1] = __uint_as_float(q.y);
    v[2] = __uint_as_float(q.z);
    v[3] = __uint_as_float(q.w);
  }
  __device__ static void LoadPack(const T* p, float (&v)[kPack]) {
    Unpack(__ldg(reinterpret_cast<const uint4*>(p)), v);
  }
  __device__ static void StorePack(T* p, const float (&v)[kPack]) {
    __stwb(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  }
};

// FromFloat2 rounds two floats into one 32-bit word (lo in the low half)
// with one F2FP.PACK_AB instruction, where two conversions and a shift and
// an OR took four.
struct HalfBits {
  __device__ static float ToFloat(uint16_t b) {
    return __half2float(__ushort_as_half(b));
  }
  __device__ static uint16_t FromFloat(float v) {
    return __half_as_ushort(__float2half_rn(v));
  }
  __device__ static uint32_t FromFloat2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
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
  __device__ static uint32_t FromFloat2(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

// The 16-bit types move as raw bits: eight elements per 16-byte pack, two
// per 32-bit word, element 2i in the low half of word i (little-endian, the
// order of the elements in memory).
template <typename Bits>
struct Bits16Io {
  using T = uint16_t;
  static constexpr int kPack = 8;
  static constexpr bool kRoundsTo16Bits = true;
  __device__ static float Load(const T* p) { return Bits::ToFloat(__ldg(p)); }
  __device__ static void Store(T* p, float v) { *p = Bits::FromFloat(v); }
  __device__ static void LoadPack(const T* p, float (&v)[kPack]) {
    Unpack(__ldg(reinterpret_cast<const uint4*>(p)), v);
  }
  __device__ static void Unpack(uint4 q, float (&v)[kPack]) {
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
    for (int i = 0; i < 4; ++i) w[i] = Bits::FromFloat2(v[2 * i], v[2 * i + 1]);
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

// The fused kernels' forms for 16-bit outputs, where a 16-bit row leaves fewer
// instructions per element than erff and tanhf take (ncu on the H200 with erff:
// 59 instructions per element at [8192,4096] bfloat16, issue-bound at 75% of
// the issue slots and 0.53 of the copy peak; `scripts/gpu-check.sh OUT profile`
// reads these counters) and where their last ulps cannot survive rounding to 8
// or 11 mantissa bits. Both are built on the MUFU approximations (ex2, rcp:
// about 2^-22 relative) and stay float32 arithmetic:
// - erf: Phi(-|v|) = erfc(|v| / sqrt 2) / 2 by Abramowitz and Stegun 7.1.26,
//   t = 1 / (1 + p x), erfc(x) = t P(t) exp(-x^2), absolute error under
//   1.5e-7 for every x >= 0 (about 2e-7 with float32 rounding), and no
//   cancellation in the negative tail. 13 instructions against about 29.
// - tanh: 0.5 (1 + tanh z) = 1 / (1 + exp(-2z)), about 9 instructions
//   against about 25; exp overflowing to inf gives 0, the right limit.
__device__ __forceinline__ float Ex2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float RcpApprox(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float GeluErfFast(float v) {
  // A&S 7.1.26 with x = |v| / sqrt 2: p / sqrt 2 and a_i / 2 (the 1/2 of
  // Phi folded in), so Phi(-|v|) = t q exp(-v^2 / 2).
  const float av = fabsf(v);
  const float t = RcpApprox(fmaf(av, 0.23164189f, 1.0f));
  float q = 0.53070271f;
  q = fmaf(q, t, -0.72657601f);
  q = fmaf(q, t, 0.71070687f);
  q = fmaf(q, t, -0.14224837f);
  q = fmaf(q, t, 0.12741480f);
  // exp(-v^2 / 2) = 2^(-v^2 log2(e) / 2).
  const float e = Ex2Approx(v * v * -0.72134752f);
  // v Phi(v) = max(v, 0) - |v| Phi(-|v|) on both sides of 0: one FMNMX and
  // one FFMA where a compare, a select and a subtraction took three more.
  return fmaf(-(av * t) * q, e, fmaxf(v, 0.0f));
}

__device__ __forceinline__ float GeluTanhFast(float v) {
  // -2 z log2(e), z = sqrt(2 / pi) (v + 0.044715 v^3).
  const float a = v * fmaf(v * v, -0.10294324f, -2.3022082f);
  return v * RcpApprox(1.0f + Ex2Approx(a));
}

// The approximation is a template parameter: a run-time choice per element
// splits the row's code into branch regions that ptxas does not schedule
// loads across. kFast: the forms above (fused kernels, 16-bit outputs).
template <bool kTanh, bool kFast = false>
__device__ __forceinline__ float Gelu(float v) {
  if constexpr (kFast) return kTanh ? GeluTanhFast(v) : GeluErfFast(v);
  return kTanh ? GeluTanh(v) : GeluErf(v);
}

// ------------------------------------------------------------- row layout

// A row is spread over kStride threads (a warp or a block); thread t holds
// kVecs slots of kPack elements in registers.
// - Vector layout: slot i is the 16-byte pack number i * kStride + t, so a
//   warp's accesses are 512 contiguous bytes. Needs hidden % kPack == 0,
//   which makes each pack wholly inside the row or wholly past it.
// - Scalar layout (rows not 16-byte aligned): element (i * kPack + k) *
//   kStride + t, so each scalar access of a warp is still contiguous.
// - Whole rows: the vector layout for rows of exactly kVecs * kPack *
//   kStride elements (hidden == the instance's capacity, as the target
//   shapes' 768, 1024, ..., 8192 are), where every element is inside.
// Either way element (i, k) of thread t is First(t) + Offset(i, k) with a
// compile-time Offset, so every access is one base register plus an
// immediate, and "inside the row" is Offset(i, k) < hidden - First(t): a
// compare with an immediate, cheap to recompute wherever it is needed, and
// a constant for whole rows, so that their code has no bounds tests, no
// predicated accesses and no values set for elements past the row (ptxas,
// 16-bit rows of 768 in warp_per_row: 4.7 such instructions per element
// of about 50).
enum class Rows : int { kScalar, kVector, kWhole };

// Whether rows of kind r move as 16-byte packs (the vector layout).
constexpr bool Packed(Rows r) { return r != Rows::kScalar; }

// Calls f(std::integral_constant<Rows, kind>{}) with the kind of rows an
// instance of capacity elements serves: kScalar off the vector path, kWhole
// for rows of exactly its capacity, kVector otherwise.
template <bool kVector, typename F>
decltype(auto) DispatchRows(int64_t hidden, int64_t capacity, F&& f) {
  if constexpr (!kVector) {
    return f(std::integral_constant<Rows, Rows::kScalar>{});
  } else if (hidden == capacity) {
    return f(std::integral_constant<Rows, Rows::kWhole>{});
  } else {
    return f(std::integral_constant<Rows, Rows::kVector>{});
  }
}

template <int kPack, Rows kRows, int kStride>
struct RowLayout {
  static constexpr bool kPacked = Packed(kRows);
  __device__ static int First(int t) { return kPacked ? t * kPack : t; }
  __device__ static constexpr int Offset(int i, int k) {
    return kPacked ? i * kStride * kPack + k : (i * kPack + k) * kStride;
  }
  // Whether element (i, k) is inside the row, limit = hidden - First(t).
  // Vector layout: per pack (limit is a multiple of kPack there).
  __device__ static bool Inside(int i, int k, int limit) {
    if constexpr (kRows == Rows::kWhole) return true;
    return Offset(i, kPacked ? 0 : k) < limit;
  }
};

// -------------------------------------------------------------- reductions

// Butterfly sum: every lane ends with the warp's sum, with the same bits in
// every lane, because each step adds the same two values in both partner
// lanes and float addition commutes.
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
  if constexpr (kWarps <= 4) {
    // A few partials: read them all, in the same order everywhere, rather
    // than a five-step butterfly over mostly zeros.
    float s = partial[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s += partial[w];
    return s;
  } else {
    return WarpSum(lane < kWarps ? partial[lane] : 0.0f);
  }
}

// A row's mean and variance over the threads that hold it (GeluLnRowFrom):
//   mean = reduce.Mean(sum of this thread's elements)
//   var = reduce.Variance(sum of (element - mean)^2 over them)
// No E[h^2] - E[h]^2: every square is of a deviation from the mean.

// A warp per row: two butterfly sums.
struct WarpReducer {
  float inv_hidden;
  __device__ float Mean(float sum) const { return WarpSum(sum) * inv_hidden; }
  __device__ float Variance(float squares) const {
    return WarpSum(squares) * inv_hidden;
  }
};

// A block per row: two block sums, two barriers. partial holds a float per
// warp for each: each sum's barrier separates the other buffer's reads from
// its next writes.
template <int kThreads>
struct BlockReducer {
  static constexpr int kWarps = kThreads / 32;
  float (*partial)[kWarps];  // [mean or squares][warp]
  float inv_hidden;
  __device__ float Mean(float sum) const {
    return BlockSum<kThreads>(sum, partial[0]) * inv_hidden;
  }
  __device__ float Variance(float squares) const {
    return BlockSum<kThreads>(squares, partial[1]) * inv_hidden;
  }
};

// ------------------------------------------------------- fused row routine

// Slot i of a row (p already advanced by First(t)) into v; elements past
// the row (Offset >= limit) get `absent`.
template <typename Io, Rows kRows, int kStride>
__device__ __forceinline__ void LoadSlot(const typename Io::T* p, int i,
                                         int limit, float absent,
                                         float (&v)[Io::kPack]) {
  constexpr int kPack = Io::kPack;
  using L = RowLayout<kPack, kRows, kStride>;
  if constexpr (L::kPacked) {
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

template <typename Io, Rows kRows, int kStride>
__device__ __forceinline__ void StoreSlot(typename Io::T* p, int i, int limit,
                                          const float (&v)[Io::kPack]) {
  constexpr int kPack = Io::kPack;
  using L = RowLayout<kPack, kRows, kStride>;
  if constexpr (L::kPacked) {
    if (L::Inside(i, 0, limit)) Io::StorePack(p + L::Offset(i, 0), v);
  } else {
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      if (L::Inside(i, k, limit)) Io::Store(p + L::Offset(i, k), v[k]);
    }
  }
}

// Where a row routine reads bias, gamma and beta from, with the values
// LoadSlot gives past the row (0, 1, 0); whether each is present is Args'.
// GlobalParams: global memory in the operands' dtype, every row (through
// L1: they are small and every row reads the same).
template <typename Io, Rows kRows, int kStride>
struct GlobalParams {
  const typename Io::T* bias;  // advanced by First(t)
  const typename Io::T* gamma;
  const typename Io::T* beta;
  int limit;  // hidden - First(t)
  __device__ static GlobalParams Of(const Args& a, int t) {
    using T = typename Io::T;
    using L = RowLayout<Io::kPack, kRows, kStride>;
    const int first = L::First(t);
    const auto at = [&](const void* p) {
      return p == nullptr ? nullptr : static_cast<const T*>(p) + first;
    };
    return {at(a.bias), at(a.gamma), at(a.beta),
            static_cast<int>(a.hidden) - first};
  }
  __device__ void Bias(int i, float (&v)[Io::kPack]) const {
    LoadSlot<Io, kRows, kStride>(bias, i, limit, 0.0f, v);
  }
  __device__ void Gamma(int i, float (&v)[Io::kPack]) const {
    LoadSlot<Io, kRows, kStride>(gamma, i, limit, 1.0f, v);
  }
  __device__ void Beta(int i, float (&v)[Io::kPack]) const {
    LoadSlot<Io, kRows, kStride>(beta, i, limit, 0.0f, v);
  }
};

// SharedParams (vector layout): float32 copies of this thread's own slots,
// staged once by a persistent kernel in shared memory, so that each row
// reads them with 16-byte shared loads and converts nothing, where
// GlobalParams costs a load and a conversion per element and operand of a
// 16-bit row. Each thread reads only what it wrote: no barrier. Layout:
// float4 (operand o, slot i, quarter q, thread t) at ((o * kVecs + i) * kQ
// + q) * kStride + t, so a warp's loads are 512 contiguous bytes,
// conflict-free, and every offset but t's is an immediate: one register
// for all three operands (three generic pointers spilled at 80 registers).
// The block's dynamic shared memory, where SharedParams stages.
extern __shared__ float4 staged_params[];

template <typename Io, int kVecs, int kStride>
struct SharedParams {
  static constexpr int kQ = Io::kPack / 4;
  // float4s per operand; room is kept for all three.
  static constexpr int kPerOperand = kVecs * kQ * kStride;
  static constexpr size_t kBytes = 3 * kPerOperand * sizeof(float4);
  int t;  // this thread's index among the kStride
  enum Operand { kBias = 0, kGamma = 1, kBeta = 2 };

  __device__ static SharedParams Stage(const Args& a, int t) {
    float4* smem = staged_params;
    const auto g = GlobalParams<Io, Rows::kVector, kStride>::Of(a, t);
    const auto stage = [&](Operand o, const void* present, auto&& load) {
      if (present == nullptr) return;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        float v[Io::kPack];
        load(i, v);
#pragma unroll
        for (int q = 0; q < kQ; ++q) {
          smem[t + ((o * kVecs + i) * kQ + q) * kStride] =
              make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
        }
      }
    };
    stage(kBias, a.bias, [&](int i, auto& v) { g.Bias(i, v); });
    stage(kGamma, a.gamma, [&](int i, auto& v) { g.Gamma(i, v); });
    stage(kBeta, a.beta, [&](int i, auto& v) { g.Beta(i, v); });
    return {t};
  }
  __device__ void Read(Operand o, int i, float (&v)[Io::kPack]) const {
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      const float4 f = staged_params[t + ((o * kVecs + i) * kQ + q) * kStride];
      v[4 * q] = f.x;
      v[4 * q + 1] = f.y;
      v[4 * q + 2] = f.z;
      v[4 * q + 3] = f.w;
    }
  }
  __device__ void Bias(int i, float (&v)[Io::kPack]) const {
    Read(kBias, i, v);
  }
  __device__ void Gamma(int i, float (&v)[Io::kPack]) const {
    Read(kGamma, i, v);
  }
  __device__ void Beta(int i, float (&v)[Io::kPack]) const {
    Read(kBeta, i, v);
  }
};

// Pack i of a thread's part of a row whose first element is at p (the row's
// element L::First(t)), read through the read-only path; 0.0 in every dtype
// past the row (limit: hidden - L::First(t)).
template <typename L, typename T>
__device__ __forceinline__ uint4 RawPackOrZero(const T* p, int i, int limit) {
  return L::Inside(i, 0, limit)
             ? __ldg(reinterpret_cast<const uint4*>(p + L::Offset(i, 0)))
             : make_uint4(0, 0, 0, 0);
}

// RawSharedParams (vector layout, 16-bit types): bias, gamma and beta as
// this thread's own raw 16-byte packs in shared memory, staged once per
// block and unpacked per row, at half SharedParams' bytes (3 x 16 bytes per
// slot and thread). Packs past the row stage as 0.0: bias must be 0 there
// (see GeluLnRowFrom), and gamma and beta meet only elements never stored.
// Pack (operand o, slot i, thread t) at (o * kVecs + i) * kStride + t: a
// warp's loads are 512 contiguous bytes. Each thread reads only what it
// wrote: no barrier.
template <typename Io, Rows kRows, int kVecs, int kStride>
struct RawSharedParams {
  static_assert(Packed(kRows), "16-byte packs");
  static constexpr int kPacks = 3 * kVecs * kStride;
  const uint4* smem;  // advanced by t
  __device__ static RawSharedParams Stage(const Args& a, int t, uint4* smem) {
    using T = typename Io::T;
    using L = RowLayout<Io::kPack, kRows, kStride>;
    const int first = L::First(t);
    const int limit = static_cast<int>(a.hidden) - first;
    const void* operands[3] = {a.bias, a.gamma, a.beta};
#pragma unroll
    for (int o = 0; o < 3; ++o) {
      if (operands[o] == nullptr) continue;
      const T* p = static_cast<const T*>(operands[o]) + first;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        smem[(o * kVecs + i) * kStride + t] = RawPackOrZero<L>(p, i, limit);
      }
    }
    return {smem + t};
  }
  __device__ void Bias(int i, float (&v)[Io::kPack]) const {
    Io::Unpack(smem[i * kStride], v);
  }
  __device__ void Gamma(int i, float (&v)[Io::kPack]) const {
    Io::Unpack(smem[(kVecs + i) * kStride], v);
  }
  __device__ void Beta(int i, float (&v)[Io::kPack]) const {
    Io::Unpack(smem[(2 * kVecs + i) * kStride], v);
  }
};

// One row of the fused op by kStride cooperating threads (t is this thread's
// index among them), the row held in registers: global memory is read once
// (x, residual; bias, gamma and beta are small and come from L1 or shared
// memory through params, a GlobalParams, SharedParams or RawSharedParams)
// and written once
// (y, and h when requested). Mean and variance come from the registers by
// reduce (a WarpReducer or BlockReducer: squares of deviations only, never
// E[h^2] - E[h]^2, which cancels for rows whose mean is large against their
// spread). Requires hidden <= kVecs * kPack * kStride.
//
// GeluLnRowFrom takes the row's x and residual already in registers (v and
// r, 0 past the row and r 0 without a residual) and calls prefetch() once
// they are consumed, before the reductions: a pipelined kernel issues the
// next row's loads there, so that they fly during this row's barriers,
// normalization and stores.
template <typename Io, int kVecs, Rows kRows, bool kTanh, int kStride,
          typename Reducer, typename Params, typename Prefetch>
__device__ __forceinline__ void GeluLnRowFrom(
    const Args& a, int64_t row, int t, float (&v)[kVecs][Io::kPack],
    const float (&r)[kVecs][Io::kPack], const Reducer& reduce,
    const Params& params, Prefetch&& prefetch) {
  using T = typename Io::T;
  constexpr int kPack = Io::kPack;
  using L = RowLayout<kPack, kRows, kStride>;
  const int hidden = static_cast<int>(a.hidden);
  const int first = L::First(t);
  const int limit = hidden - first;  // <= 0 when t holds nothing
  const int64_t offset = row * a.hidden + first;

  // h = gelu(x + bias) + residual; elements past the row stay exactly 0
  // (x, bias and residual read as 0 there, and gelu(0) = 0), so the loop
  // needs no bounds test: with one, ptxas split it into a branch per slot.
  if (a.bias != nullptr) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      float b[kPack];
      params.Bias(i, b);
#pragma unroll
      for (int k = 0; k < kPack; ++k) v[i][k] += b[k];
    }
  }
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      v[i][k] = Gelu<kTanh, Io::kRoundsTo16Bits>(v[i][k]) + r[i][k];
    }
  }
  prefetch();
  if (a.h != nullptr) {
    T* h = static_cast<T*>(a.h) + offset;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      StoreSlot<Io, kRows, kStride>(h, i, limit, v[i]);
    }
  }

  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
#pragma unroll
    for (int k = 0; k < kPack; ++k) sum += v[i][k];
  }
  const float mean = reduce.Mean(sum);

  // v becomes h - mean (0 past the row), kept for the normalization.
  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      v[i][k] = L::Inside(i, k, limit) ? v[i][k] - mean : 0.0f;
      squares += v[i][k] * v[i][k];
    }
  }
  // rsqrtf: MUFU.RSQ, 2 ulp, no slow-path call (see inv_hidden).
  const float rstd = rsqrtf(reduce.Variance(squares) + a.eps);

#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
#pragma unroll
    for (int k = 0; k < kPack; ++k) v[i][k] *= rstd;
  }
  // y = n gamma + beta, one FMA where both are present.
  if (a.gamma != nullptr && a.beta != nullptr) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      float g[kPack], b[kPack];
      params.Gamma(i, g);
      params.Beta(i, b);
#pragma unroll
      for (int k = 0; k < kPack; ++k) v[i][k] = fmaf(v[i][k], g[k], b[k]);
    }
  } else if (a.gamma != nullptr) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      float g[kPack];
      params.Gamma(i, g);
#pragma unroll
      for (int k = 0; k < kPack; ++k) v[i][k] *= g[k];
    }
  } else if (a.beta != nullptr) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      float b[kPack];
      params.Beta(i, b);
#pragma unroll
      for (int k = 0; k < kPack; ++k) v[i][k] += b[k];
    }
  }
  T* y = static_cast<T*>(a.y) + offset;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    StoreSlot<Io, kRows, kStride>(y, i, limit, v[i]);
  }
}

// The row's x and residual as floats (0 past the row; r 0 without a
// residual). Every load comes before the first GELU, in loops of their own:
// with the residual loaded inside the GELU loop ptxas issued it one pack at
// a time, a memory latency per pack.
template <typename Io, int kVecs, Rows kRows, int kStride>
__device__ __forceinline__ void LoadRow(const Args& a, int64_t row, int t,
                                        float (&v)[kVecs][Io::kPack],
                                        float (&r)[kVecs][Io::kPack]) {
  using T = typename Io::T;
  constexpr int kPack = Io::kPack;
  using L = RowLayout<kPack, kRows, kStride>;
  const int first = L::First(t);
  const int limit = static_cast<int>(a.hidden) - first;
  const int64_t offset = row * a.hidden + first;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    LoadSlot<Io, kRows, kStride>(static_cast<const T*>(a.x) + offset, i, limit,
                                 0.0f, v[i]);
  }
  const T* residual = static_cast<const T*>(a.residual);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    if (residual != nullptr) {
      LoadSlot<Io, kRows, kStride>(residual + offset, i, limit, 0.0f, r[i]);
    } else {
#pragma unroll
      for (int k = 0; k < kPack; ++k) r[i][k] = 0.0f;
    }
  }
}

// One row, loaded and finished (see GeluLnRowFrom).
template <typename Io, int kVecs, Rows kRows, bool kTanh, int kStride,
          typename Reducer>
__device__ __forceinline__ void GeluLnRow(const Args& a, int64_t row, int t,
                                          const Reducer& reduce) {
  float v[kVecs][Io::kPack];
  float r[kVecs][Io::kPack];
  LoadRow<Io, kVecs, kRows, kStride>(a, row, t, v, r);
  GeluLnRowFrom<Io, kVecs, kRows, kTanh, kStride>(
      a, row, t, v, r, reduce, GlobalParams<Io, kRows, kStride>::Of(a, t),
      [] {});
}

// A row's x and residual as raw 16-byte packs (vector layout only): what a
// pipelined kernel holds for the next row while it finishes the current one,
// half the registers of floats for 16-bit types.
template <int kVecs>
struct RawRow {
  uint4 x[kVecs];
  uint4 r[kVecs];
};

template <typename Io, int kVecs, Rows kRows, int kStride>
__device__ __forceinline__ void LoadRawRow(const Args& a, int64_t row, int t,
                                           RawRow<kVecs>& raw) {
  static_assert(Packed(kRows), "raw packs need the vector layout");
  using L = RowLayout<Io::kPack, kRows, kStride>;
  const int first = L::First(t);
  const int limit = static_cast<int>(a.hidden) - first;
  const int64_t offset = row * a.hidden + first;
  const auto* x = static_cast<const typename Io::T*>(a.x) + offset;
  const auto* residual = static_cast<const typename Io::T*>(a.residual);
  const uint4 zero = make_uint4(0, 0, 0, 0);  // 0.0 in every dtype
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    raw.x[i] = RawPackOrZero<L>(x, i, limit);
  }
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    raw.r[i] = residual != nullptr && L::Inside(i, 0, limit)
                   ? __ldg(reinterpret_cast<const uint4*>(residual + offset +
                                                          L::Offset(i, 0)))
                   : zero;
  }
}

template <typename Io, int kVecs>
__device__ __forceinline__ void UnpackRawRow(const RawRow<kVecs>& raw,
                                             float (&v)[kVecs][Io::kPack],
                                             float (&r)[kVecs][Io::kPack]) {
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    Io::Unpack(raw.x[i], v[i]);
    Io::Unpack(raw.r[i], r[i]);
  }
}

// One row of a pipelined kernel (persistent: kStride threads take rows
// row, row + row_step, ...; t is this thread's index among them) from
// raw[kBuf], prefetching the next row into the other buffer while this one
// is reduced, normalized and stored; advances row and says whether one is
// left. Callers alternate kBuf = 0, 1 so raw is indexed by constants only
// and stays in registers.
template <typename Io, int kVecs, Rows kRows, bool kTanh, int kStride, int kBuf,
          typename Reducer, typename Params>
__device__ __forceinline__ bool PipelinedRow(const Args& a, int64_t& row,
                                             int64_t row_step, int t,
                                             RawRow<kVecs> (&raw)[2],
                                             const Reducer& reduce,
                                             const Params& params) {
  float v[kVecs][Io::kPack];
  float r[kVecs][Io::kPack];
  UnpackRawRow<Io>(raw[kBuf], v, r);
  const int64_t next = row + row_step;
  GeluLnRowFrom<Io, kVecs, kRows, kTanh, kStride>(
      a, row, t, v, r, reduce, params, [&] {
        if (next < a.rows)
          LoadRawRow<Io, kVecs, kRows, kStride>(a, next, t, raw[1 - kBuf]);
      });
  row = next;
  return row < a.rows;
}

// Rows row, row + row_step, ... < a.rows, pipelined (see PipelinedRow),
// bias, gamma and beta read through the params make_params() returns
// (GlobalParams or SharedParams), made once the first row's loads are
// issued: staging params before them puts two memory latencies in a row,
// 0.5 us more per launch where each block has one row ([128,768]:
// `coalesce-bench kernels --ops=gelu_layer_norm --shape=128,768`).
template <typename Io, int kVecs, Rows kRows, bool kTanh, int kStride,
          typename Reducer, typename MakeParams>
__device__ __forceinline__ void PipelinedRows(const Args& a, int64_t row,
                                              int64_t row_step, int t,
                                              const Reducer& reduce,
                                              MakeParams&& make_params) {
  if (row >= a.rows) return;
  RawRow<kVecs> raw[2];
  LoadRawRow<Io, kVecs, kRows, kStride>(a, row, t, raw[0]);
  const auto params = make_params();
  while (PipelinedRow<Io, kVecs, kRows, kTanh, kStride, 0>(
             a, row, row_step, t, raw, reduce, params) &&
         PipelinedRow<Io, kVecs, kRows, kTanh, kStride, 1>(
             a, row, row_step, t, raw, reduce, params)) {
  }
}

// Rows row, row + row_step, ... < a.rows with the next kDepth - 1 rows'
// x and residual in flight to shared memory by cp.async (LDGSTS), where
// PipelinedRows holds the next row in registers: a row in flight costs no
// registers, so blocks of 16-bit rows of 8192 fit two per SM. Bias, gamma
// and beta through the params make_params() returns, made once the first
// rows' copies are issued (as PipelinedRows). ring: kRingPacks(kVecs,
// kStride, kDepth) packs of this block's dynamic shared memory:
// pack (buffer b, operand o, slot i, thread t) at ((b * 2 + o) * kVecs +
// i) * kStride + t, so a warp's copies and reads are 512 contiguous bytes.
// Each thread copies and reads only its own packs: no barrier guards the
// ring, cp.async.wait_group does. Past the row, or without a residual,
// the copy zero-fills (0.0 in every dtype).
template <int kVecs, int kStride, int kDepth>
inline constexpr int kRingPacks = kDepth * 2 * kVecs* kStride;

template <typename Io, int kVecs, Rows kRows, bool kTanh, int kStride,
          int kDepth, typename Reducer, typename MakeParams>
__device__ __forceinline__ void SmemPipelinedRows(const Args& a, int64_t row,
                                                  int64_t row_step, int t,
                                                  const Reducer& reduce,
                                                  MakeParams&& make_params,
                                                  uint4* ring) {
  static_assert(Packed(kRows), "16-byte packs");
  static_assert(kDepth >= 2);
  using T = typename Io::T;
  using L = RowLayout<Io::kPack, kRows, kStride>;
  const int first = L::First(t);
  const int limit = static_cast<int>(a.hidden) - first;
  const auto* x = static_cast<const T*>(a.x) + first;
  const auto* residual = static_cast<const T*>(a.residual);
  const auto pack = [&](int buf, int operand, int i) {
    return ring + ((buf * 2 + operand) * kVecs + i) * kStride + t;
  };
  // Row r's packs into buffer buf (nothing read past the rows: a group of
  // zero-filled copies), one commit group per row.
  const auto issue = [&](int64_t r, int buf) {
    const bool live = r < a.rows;
    const int64_t offset = live ? r * a.hidden : 0;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const bool inside = live && L::Inside(i, 0, limit);
      CpAsync<16>(SharedAddress(pack(buf, 0, i)), x + offset + L::Offset(i, 0),
                  inside);
      CpAsync<16>(SharedAddress(pack(buf, 1, i)),
                  residual != nullptr
                      ? residual + first + offset + L::Offset(i, 0)
                      : a.x,
                  inside && residual != nullptr);
    }
    CpAsyncCommit();
  };
#pragma unroll
  for (int d = 0; d < kDepth - 1; ++d) issue(row + d * row_step, d);
  const auto params = make_params();
  int buf = 0;
  for (; row < a.rows; row += row_step) {
    CpAsyncWait<kDepth - 2>();  // this row's group is complete
    float v[kVecs][Io::kPack];
    float r[kVecs][Io::kPack];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      Io::Unpack(*pack(buf, 0, i), v[i]);
      Io::Unpack(*pack(buf, 1, i), r[i]);
    }
    // The buffer the previous row freed takes the row kDepth - 1 ahead,
    // once this row's packs are in registers.
    const int ahead_buf = buf == 0 ? kDepth - 1 : buf - 1;
    const int64_t ahead = row + (kDepth - 1) * row_step;
    GeluLnRowFrom<Io, kVecs, kRows, kTanh, kStride>(
        a, row, t, v, r, reduce, params, [&] { issue(ahead, ahead_buf); });
    buf = buf == kDepth - 1 ? 0 : buf + 1;
  }
  CpAsyncWait<0>();  // no copy outlives the block
}

}  // namespace coalesce::cuda::gelu_ln
