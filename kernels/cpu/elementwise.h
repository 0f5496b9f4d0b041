// Element access templated over the storage type, so that the arithmetic
// kernels (GEMM's conversions, the fused GELU-LayerNorm) are written once
// and instantiated per dtype instead of switching per element. Stateless and
// thread-safe.
#pragma once

#include <cstdint>
#include <utility>

#include "base/dtype.h"

namespace coalesce::cpu {

struct F32 {
  using Storage = float;
  static float Load(float v) { return v; }
  static float Store(float v) { return v; }
};
struct F16 {
  using Storage = uint16_t;
  static float Load(uint16_t v) { return HalfToFloat(v); }
  static uint16_t Store(float v) { return FloatToHalf(v); }
};
struct BF16 {
  using Storage = uint16_t;
  static float Load(uint16_t v) { return BFloat16ToFloat(v); }
  static uint16_t Store(float v) { return FloatToBFloat16(v); }
};

// Calls f(F32{}), f(F16{}) or f(BF16{}) according to t.
template <typename F>
decltype(auto) DispatchDType(DType t, F&& f) {
  switch (t) {
    case DType::kFloat16:
      return std::forward<F>(f)(F16{});
    case DType::kBFloat16:
      return std::forward<F>(f)(BF16{});
    case DType::kFloat32:
      break;
  }
  return std::forward<F>(f)(F32{});
}

// n elements of type t to float32 and back (rounding to nearest even),
// parallel above kParallelMinBytes.
void ToFloat(const void* src, DType t, int64_t n, float* dst);
void FromFloat(const float* src, DType t, int64_t n, void* dst);

}  // namespace coalesce::cpu
