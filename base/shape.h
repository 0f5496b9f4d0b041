// Shape arithmetic shared by the kernels, the server's codec and the client:
// the shape type, element counts (plain, or checked against negative
// dimensions and int64 overflow for shapes that come from outside), and the
// printed form used in error messages. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace coalesce {

inline constexpr int kMaxRank = 6;
using Shape = absl::InlinedVector<int64_t, kMaxRank>;

// The product of dims, for shapes already validated.
int64_t NumElements(absl::Span<const int64_t> dims);

// The product of dims, or false when it overflows int64.
bool CheckedProduct(absl::Span<const int64_t> dims, int64_t* product);

// The product of dims; INVALID_ARGUMENT naming the shape when a dimension is
// negative or the product overflows int64.
absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> dims);

// "[2,3,4]"; past 8 dimensions the first 8 and the rank, so that an error
// quoting a client's shape stays short.
std::string ShapeString(absl::Span<const int64_t> dims);

}  // namespace coalesce
