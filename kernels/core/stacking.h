// Stacking: problems of one op that differ only in their leading dimension
// run as one launch over the problems laid end to end along it. This is how
// the server batches concurrent requests (transposes with a batch dimension,
// layout conversions along N, GELU-LN rows, GEMMs that share B by rows of
// A). Every output, and the inputs marked stacked, are contiguous per
// leading index, so part j's slice of an operand starts where part j-1's
// ends; the other inputs are shared: equal in every part.
// Plain functions of values; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "kernels/core/problem.h"

namespace coalesce {

struct StackInfo {
  // Equal for two problems exactly when they stack: the op, the dtype,
  // every dimension but the leading one and the op's parameters.
  std::string key;
  // This problem's extent along the leading dimension.
  int64_t leading = 0;
  // Per input in operand order: stacked (each part has its own slice) or
  // shared (one tensor for all parts; absent operands are shared).
  absl::InlinedVector<bool, 6> input_stacked;
};

// nullopt where p cannot stack: an empty problem, a batched GEMM or one
// with A transposed, a permutation that moves the leading dimension.
std::optional<StackInfo> StackInfoOf(const Problem& p);

// p with its leading dimension set to `leading` (e.g. the parts' sum).
// p must stack (StackInfoOf(p) has a value).
Problem WithLeading(const Problem& p, int64_t leading);

// The problem the parts make together: WithLeading(parts[0], the sum of
// their leading extents). The parts must be non-empty and share one key.
Problem Stacked(absl::Span<const Problem> parts);

}  // namespace coalesce
