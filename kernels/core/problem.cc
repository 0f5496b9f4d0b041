#include "kernels/core/problem.h"

#include <cstring>
#include <tuple>
#include <type_traits>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"

namespace coalesce {

absl::string_view OpName(OpKind op) {
  switch (op) {
    case OpKind::kTranspose:
      return "transpose";
    case OpKind::kGemm:
      return "gemm";
    case OpKind::kConvertLayout:
      return "convert_layout";
    case OpKind::kGeluLayerNorm:
      return "gelu_layer_norm";
  }
  return "unknown";
}

absl::string_view LayoutKindName(LayoutKind k) {
  switch (k) {
    case LayoutKind::kPermute:
      return "permute";
    case LayoutKind::kNchwToNhwc:
      return "nchw_to_nhwc";
    case LayoutKind::kNhwcToNchw:
      return "nhwc_to_nchw";
    case LayoutKind::kAosToSoa:
      return "aos_to_soa";
    case LayoutKind::kSoaToAos:
      return "soa_to_aos";
  }
  return "unknown";
}

namespace {

struct OpOfVisitor {
  OpKind operator()(const TransposeProblem&) const {
    return OpKind::kTranspose;
  }
  OpKind operator()(const GemmProblem&) const { return OpKind::kGemm; }
  OpKind operator()(const PermuteProblem&) const {
    return OpKind::kConvertLayout;
  }
  OpKind operator()(const GeluLnProblem&) const {
    return OpKind::kGeluLayerNorm;
  }
};

struct BytesVisitor {
  OperandSizes operator()(const TransposeProblem& p) const {
    const int64_t b = p.batch * p.rows * p.cols * ElementSize(p.dtype);
    return {{b}, {b}};
  }
  OperandSizes operator()(const GemmProblem& p) const {
    const int64_t es = ElementSize(p.dtype);
    const int64_t nb_a = p.stride_a == 0 ? 1 : p.batch;
    const int64_t nb_b = p.stride_b == 0 ? 1 : p.batch;
    const int64_t nb_c = p.stride_c == 0 ? 1 : p.batch;
    return {{nb_a * p.m * p.k * es, nb_b * p.k * p.n * es,
             p.has_c ? nb_c * p.m * p.n * es : 0},
            {p.batch * p.m * p.n * es}};
  }
  OperandSizes operator()(const PermuteProblem& p) const {
    const int64_t b = NumElements(p.in_shape) * ElementSize(p.dtype);
    return {{b}, {b}};
  }
  OperandSizes operator()(const GeluLnProblem& p) const {
    const int64_t es = ElementSize(p.dtype);
    const int64_t full = p.rows * p.hidden * es;
    const int64_t vec = p.hidden * es;
    return {{full, p.has_bias ? vec : 0, p.has_residual ? full : 0,
             p.has_gamma ? vec : 0, p.has_beta ? vec : 0},
            {full, p.return_pre_norm ? full : 0}};
  }
};

struct FlopsVisitor {
  double operator()(const TransposeProblem&) const { return 0; }
  double operator()(const GemmProblem& p) const {
    const double mn = static_cast<double>(p.m) * p.n;
    return p.batch * (2.0 * mn * p.k + 2.0 * mn + (p.has_c ? 2.0 * mn : 0));
  }
  double operator()(const PermuteProblem&) const { return 0; }
  double operator()(const GeluLnProblem& p) const {
    // About 20 flops per element for bias, GELU, residual, mean, variance
    // and the affine transform; a nominal count for reports only.
    return 20.0 * p.rows * p.hidden;
  }
};

std::string ShapeStr(const Shape& s) {
  return absl::StrCat("[", absl::StrJoin(s, ","), "]");
}

struct DescribeVisitor {
  std::string operator()(const TransposeProblem& p) const {
    return absl::StrCat("transpose ", DTypeName(p.dtype), " [", p.batch, ",",
                        p.rows, ",", p.cols, "]");
  }
  std::string operator()(const GemmProblem& p) const {
    return absl::StrCat("gemm ", DTypeName(p.dtype), " batch=", p.batch,
                        " m=", p.m, " n=", p.n, " k=", p.k,
                        p.trans_a ? " ta" : "", p.trans_b ? " tb" : "",
                        p.has_c ? " c" : "", p.allow_tf32 ? " tf32" : "");
  }
  std::string operator()(const PermuteProblem& p) const {
    return absl::StrCat("convert_layout ", LayoutKindName(p.kind), " ",
                        DTypeName(p.dtype), " ", ShapeStr(p.in_shape),
                        " perm=[", absl::StrJoin(p.perm, ","), "]");
  }
  std::string operator()(const GeluLnProblem& p) const {
    return absl::StrCat("gelu_layer_norm ", DTypeName(p.dtype), " [", p.rows,
                        ",", p.hidden, "]");
  }
};

}  // namespace

OpKind OpOf(const Problem& p) { return std::visit(OpOfVisitor{}, p); }

DType DTypeOf(const Problem& p) {
  return std::visit([](const auto& typed) { return typed.dtype; }, p);
}

OperandSizes OperandBytes(const Problem& p) {
  return std::visit(BytesVisitor{}, p);
}

int64_t MinBytesMoved(const Problem& p) {
  const OperandSizes s = OperandBytes(p);
  int64_t total = 0;
  for (int64_t b : s.inputs) total += b;
  for (int64_t b : s.outputs) total += b;
  return total;
}

double Flops(const Problem& p) { return std::visit(FlopsVisitor{}, p); }

std::string Describe(const Problem& p) {
  return std::visit(DescribeVisitor{}, p);
}

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Every field of each problem type, as one tuple: what ProblemHash hashes
// and ProblemEq compares.
// A field added to a problem must be added to its Fields too.
static_assert(sizeof(TransposeProblem) == 32);
static_assert(sizeof(GemmProblem) == 80);
static_assert(sizeof(GeluLnProblem) == 40);
static_assert(sizeof(PermuteProblem) == 104);

auto Fields(const TransposeProblem& p) {
  return std::make_tuple(p.dtype, p.batch, p.rows, p.cols);
}
auto Fields(const GemmProblem& p) {
  return std::make_tuple(p.dtype, p.batch, p.m, p.n, p.k, p.trans_a, p.trans_b,
                         Bits(p.alpha), Bits(p.beta), p.has_c, p.allow_tf32,
                         p.stride_a, p.stride_b, p.stride_c);
}
auto Fields(const PermuteProblem& p) {
  return std::make_tuple(p.dtype, absl::MakeConstSpan(p.in_shape),
                         absl::MakeConstSpan(p.perm), p.kind);
}
auto Fields(const GeluLnProblem& p) {
  return std::make_tuple(p.dtype, p.rows, p.hidden, p.has_bias, p.has_residual,
                         p.has_gamma, p.has_beta, p.return_pre_norm, p.approx,
                         Bits(p.eps));
}

}  // namespace

size_t ProblemHash::operator()(const Problem& p) const {
  return std::visit(
      [&p](const auto& q) { return absl::HashOf(p.index(), Fields(q)); }, p);
}

bool ProblemEq::operator()(const Problem& a, const Problem& b) const {
  if (a.index() != b.index()) return false;
  // Spans compare and hash by their elements.
  return std::visit(
      [&b](const auto& q) {
        return Fields(q) == Fields(std::get<std::decay_t<decltype(q)>>(b));
      },
      a);
}

}  // namespace coalesce
