// Problem descriptions: what an op must compute, independent of where the
// data lives. The server's codec builds them from requests after
// validation; variants and backends consume them. Plain values; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "base/dtype.h"
#include "base/shape.h"

namespace coalesce {

using Perm = absl::InlinedVector<int, kMaxRank>;

enum class OpKind : int {
  kTranspose = 0,
  kGemm = 1,
  kConvertLayout = 2,
  kGeluLayerNorm = 3,
};
inline constexpr OpKind kAllOps[] = {OpKind::kTranspose, OpKind::kGemm,
                                     OpKind::kConvertLayout,
                                     OpKind::kGeluLayerNorm};
// "transpose", "gemm", "convert_layout", "gelu_layer_norm".
absl::string_view OpName(OpKind op);

// [batch, rows, cols] -> [batch, cols, rows].
struct TransposeProblem {
  DType dtype = DType::kFloat32;
  int64_t batch = 1;
  int64_t rows = 0;
  int64_t cols = 0;
};

// D[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b], all row-major.
// A is [m,k] ([k,m] when trans_a), B is [k,n] ([n,k] when trans_b),
// C and D are [m,n]. stride_* are elements between batches (0 broadcasts
// one matrix over the batch).
struct GemmProblem {
  DType dtype = DType::kFloat32;
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
  bool has_c = false;
  bool allow_tf32 = false;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// Named layout conversions are permutations too; the kind is kept so that
// variants and reports can speak of what the user asked for.
enum class LayoutKind : int {
  kPermute = 0,
  kNchwToNhwc = 1,
  kNhwcToNchw = 2,
  kAosToSoa = 3,
  kSoaToAos = 4,
};
absl::string_view LayoutKindName(LayoutKind k);

// out.shape[i] = in_shape[perm[i]].
struct PermuteProblem {
  DType dtype = DType::kFloat32;
  Shape in_shape;
  Perm perm;
  LayoutKind kind = LayoutKind::kPermute;
};

enum class GeluApprox : int { kExact = 0, kTanh = 1 };

// h = gelu(x + bias) + residual; y = LayerNorm(h) * gamma + beta over the
// last dimension (hidden); x is [rows, hidden].
struct GeluLnProblem {
  DType dtype = DType::kFloat32;
  int64_t rows = 0;
  int64_t hidden = 0;
  bool has_bias = false;
  bool has_residual = false;
  bool has_gamma = false;
  bool has_beta = false;
  bool return_pre_norm = false;
  GeluApprox approx = GeluApprox::kExact;
  float eps = 1e-5f;
};

using Problem =
    std::variant<TransposeProblem, GemmProblem, PermuteProblem, GeluLnProblem>;

OpKind OpOf(const Problem& p);
// The element type of every tensor of p (inputs and outputs share it).
DType DTypeOf(const Problem& p);

// Operand order per op. Absent optional operands have size 0 and a null
// pointer.
enum GemmOperand { kGemmA = 0, kGemmB = 1, kGemmC = 2, kGemmD = 0 };
enum GeluLnOperand {
  kLnX = 0,
  kLnBias = 1,
  kLnResidual = 2,
  kLnGamma = 3,
  kLnBeta = 4,
  kLnY = 0,
  kLnH = 1,
};

using ByteSizes = absl::InlinedVector<int64_t, 6>;
struct OperandSizes {
  ByteSizes inputs;   // bytes of each input, in operand order
  ByteSizes outputs;  // bytes of each output, in operand order
};
OperandSizes OperandBytes(const Problem& p);

// Minimum bytes the op must move: every present input read once, every
// output written once.
int64_t MinBytesMoved(const Problem& p);
// Floating-point operations (0 for pure data movement).
double Flops(const Problem& p);

// A one-line description, e.g. "transpose float32 [4,1024,512]".
std::string Describe(const Problem& p);

// The exact problem as a hash key: every field, floats bit for bit (so a
// NaN parameter equals itself and a memo keyed on it cannot grow with
// repeats of one request).
struct ProblemHash {
  size_t operator()(const Problem& p) const;
};
struct ProblemEq {
  bool operator()(const Problem& a, const Problem& b) const;
};

}  // namespace coalesce
