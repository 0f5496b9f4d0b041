#include "base/shape.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace coalesce {

int64_t NumElements(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

bool CheckedProduct(absl::Span<const int64_t> dims, int64_t* product) {
  int64_t p = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(p, d, &p)) return false;
  }
  *product = p;
  return true;
}

absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> dims) {
  for (const int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeString(dims)));
    }
  }
  int64_t n = 0;
  if (!CheckedProduct(dims, &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeString(dims), " overflows int64"));
  }
  return n;
}

std::string ShapeString(absl::Span<const int64_t> dims) {
  // Shapes come from clients: an error message shows a bounded prefix.
  constexpr size_t kMaxShownDims = 8;
  if (dims.size() <= kMaxShownDims) {
    return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
  }
  return absl::StrCat("[", absl::StrJoin(dims.subspan(0, kMaxShownDims), ","),
                      ",...] (rank ", dims.size(), ")");
}

}  // namespace coalesce
