// Element types and host-side conversions between float32 and the 16-bit
// types (IEEE binary16 and bfloat16), round-to-nearest-even. Pure functions;
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace coalesce {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat16,
                                       DType::kBFloat16};

constexpr size_t ElementSize(DType t) { return t == DType::kFloat32 ? 4 : 2; }
absl::string_view DTypeName(DType t);  // "float32", "float16", "bfloat16"
bool ParseDType(absl::string_view name, DType* out);

// Unit roundoff (half of machine epsilon) of each type, for error bounds.
double UnitRoundoff(DType t);

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);
float BFloat16ToFloat(uint16_t b);

// Element i of a buffer of type t, as float.
float LoadAsFloat(const void* data, DType t, int64_t i);
// Stores v (rounded to t) as element i.
void StoreFromFloat(void* data, DType t, int64_t i, float v);

}  // namespace coalesce
