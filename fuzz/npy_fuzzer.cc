// ParseNpy on arbitrary bytes, with every choice of result dtype: the
// input's first byte picks it (none, float32, float16, bfloat16), the rest
// is the file. Checked beyond not crashing: a parsed array holds exactly
// its elements, serializes and parses back unchanged, and float16 data
// survives the trip through float32 bit for bit (NaNs stay NaN).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "absl/strings/string_view.h"
#include "base/dtype.h"
#include "base/shape.h"
#include "client/npy.h"
#include "fuzz/fuzz_check.h"

namespace coalesce {
namespace {

constexpr std::optional<DType> kWants[] = {std::nullopt, DType::kFloat32,
                                           DType::kFloat16, DType::kBFloat16};

NpyArray MustParse(absl::string_view contents, std::optional<DType> want) {
  absl::StatusOr<NpyArray> a = ParseNpy(contents, want);
  FUZZ_CHECK(a.ok(), a.status().ToString());
  return *std::move(a);
}

std::string MustSerialize(const NpyArray& a) {
  absl::StatusOr<std::string> s = SerializeNpy(a);
  FUZZ_CHECK(s.ok(), s.status().ToString());
  return *std::move(s);
}

// float16 -> float32 -> float16 is exact: every binary16 value is a float.
void CheckHalfRoundTrip(const NpyArray& half) {
  const std::string file = MustSerialize(half);
  const NpyArray wide = MustParse(file, DType::kFloat32);
  const NpyArray back = MustParse(MustSerialize(wide), DType::kFloat16);
  FUZZ_CHECK(back.bytes.size() == half.bytes.size(), back.bytes.size(), " vs ",
             half.bytes.size());
  for (size_t i = 0; i < half.bytes.size(); i += 2) {
    uint16_t a, b;
    std::memcpy(&a, &half.bytes[i], 2);
    std::memcpy(&b, &back.bytes[i], 2);
    if (std::isnan(HalfToFloat(a))) {
      FUZZ_CHECK(std::isnan(HalfToFloat(b)), "element ", i / 2);
    } else {
      FUZZ_CHECK(a == b, "element ", i / 2, ": ", a, " came back as ", b);
    }
  }
}

void FuzzOne(absl::string_view input) {
  if (input.empty()) return;
  const std::optional<DType> want = kWants[static_cast<uint8_t>(input[0]) % 4];
  const absl::string_view contents = input.substr(1);
  absl::StatusOr<NpyArray> array = ParseNpy(contents, want);
  if (!array.ok()) {
    FUZZ_CHECK(array.status().code() == absl::StatusCode::kInvalidArgument,
               array.status().ToString());
    return;
  }
  if (want.has_value()) FUZZ_CHECK(array->dtype == *want, "dtype");
  absl::StatusOr<int64_t> n = CheckedNumElements(array->shape);
  FUZZ_CHECK(n.ok(), n.status().ToString());
  FUZZ_CHECK(array->bytes.size() ==
                 static_cast<size_t>(*n) * ElementSize(array->dtype),
             array->bytes.size(), " bytes for ", *n, " elements");

  const NpyArray again = MustParse(MustSerialize(*array), std::nullopt);
  FUZZ_CHECK(again.dtype == array->dtype, "dtype after the round trip");
  FUZZ_CHECK(again.shape == array->shape, "shape after the round trip");
  FUZZ_CHECK(again.bytes == array->bytes, "bytes after the round trip");
  if (array->dtype == DType::kFloat16) CheckHalfRoundTrip(*array);
}

}  // namespace
}  // namespace coalesce

COALESCE_FUZZ_TARGET(coalesce::FuzzOne)
