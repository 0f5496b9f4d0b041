#include "kernels/core/stacking.h"

#include <cstring>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace coalesce {
namespace {

// The bits of a float, so that keys tell apart what == would not (and -0.0
// from 0.0) and never round.
uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

std::optional<StackInfo> StackInfoOf(const Problem& p) {
  if (MinBytesMoved(p) <= 0) return std::nullopt;
  const std::string dtype(DTypeName(DTypeOf(p)));
  return std::visit(
      [&](const auto& q) -> std::optional<StackInfo> {
        using T = std::decay_t<decltype(q)>;
        StackInfo s;
        if constexpr (std::is_same_v<T, TransposeProblem>) {
          s.key = absl::StrCat("transpose/", dtype, "/", q.rows, "x", q.cols);
          s.leading = q.batch;
          s.input_stacked = {true};
        } else if constexpr (std::is_same_v<T, GemmProblem>) {
          // Rows of A (and C, D) stack only when A is row-major [m,k] and
          // there is one matrix per operand.
          if (q.batch != 1 || q.trans_a) return std::nullopt;
          s.key =
              absl::StrCat("gemm/", dtype, "/n", q.n, "/k", q.k, "/tb",
                           q.trans_b, "/a", Bits(q.alpha), "/b", Bits(q.beta),
                           "/c", q.has_c, "/tf32", q.allow_tf32);
          s.leading = q.m;
          s.input_stacked = {true, false, true};
        } else if constexpr (std::is_same_v<T, PermuteProblem>) {
          if (q.in_shape.empty() || q.perm.empty() || q.perm[0] != 0) {
            return std::nullopt;
          }
          s.key = absl::StrCat(
              "permute/", dtype, "/",
              absl::StrJoin(q.in_shape.begin() + 1, q.in_shape.end(), "x"), "/",
              absl::StrJoin(q.perm, ","), "/", static_cast<int>(q.kind));
          s.leading = q.in_shape[0];
          s.input_stacked = {true};
        } else {
          static_assert(std::is_same_v<T, GeluLnProblem>);
          s.key = absl::StrCat("gelu_ln/", dtype, "/h", q.hidden, "/",
                               q.has_bias, q.has_residual, q.has_gamma,
                               q.has_beta, q.return_pre_norm, "/",
                               static_cast<int>(q.approx), "/", Bits(q.eps));
          s.leading = q.rows;
          // x and residual are per row; bias, gamma and beta per column.
          s.input_stacked = {true, false, true, false, false};
        }
        return s;
      },
      p);
}

Problem WithLeading(const Problem& p, int64_t leading) {
  Problem out = p;
  std::visit(
      [&](auto& q) {
        using T = std::decay_t<decltype(q)>;
        if constexpr (std::is_same_v<T, TransposeProblem>) {
          q.batch = leading;
        } else if constexpr (std::is_same_v<T, GemmProblem>) {
          // One matrix per operand (batch 1): no stride is ever taken.
          q.m = leading;
          q.stride_a = q.stride_b = q.stride_c = 0;
        } else if constexpr (std::is_same_v<T, PermuteProblem>) {
          q.in_shape[0] = leading;
        } else {
          q.rows = leading;
        }
      },
      out);
  return out;
}

Problem Stacked(absl::Span<const Problem> parts) {
  int64_t leading = 0;
  for (const Problem& p : parts) leading += StackInfoOf(p)->leading;
  return WithLeading(parts[0], leading);
}

}  // namespace coalesce
