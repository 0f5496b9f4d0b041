#include "base/dtype.h"

#include <cmath>
#include <cstring>

namespace coalesce {

absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

bool ParseDType(absl::string_view name, DType* out) {
  for (DType t : kAllDTypes) {
    if (name == DTypeName(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

double UnitRoundoff(DType t) {
  switch (t) {
    case DType::kFloat32:
      return std::ldexp(1.0, -24);
    case DType::kFloat16:
      return std::ldexp(1.0, -11);
    case DType::kBFloat16:
      return std::ldexp(1.0, -8);
  }
  return 0;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u |
                                 (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {  // subnormal half or zero
    // Scale into the subnormal range with the FPU doing the rounding.
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 16777216.0f;  // 2^24: units of the half's ulp
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t exp = ((abs >> 23) - 112u) << 10;
  uint32_t mant = abs & 0x7fffffu;
  uint32_t h = exp | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&x, &v, 4);
    x |= sign;
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  }
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float BFloat16ToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

float LoadAsFloat(const void* data, DType t, int64_t i) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<const float*>(data)[i];
    case DType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
  }
  return 0;
}

void StoreFromFloat(void* data, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kFloat32:
      static_cast<float*>(data)[i] = v;
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToHalf(v);
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToBFloat16(v);
      return;
  }
}

}  // namespace coalesce
