#include "kernels/cpu/reference.h"

#include <cmath>

#include "kernels/core/permute.h"

namespace coalesce {
namespace {

std::vector<double> Load(const void* data, DType t, int64_t n) {
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = LoadAsFloat(data, t, i);
  return out;
}

std::vector<std::vector<double>> Reference(const TransposeProblem& p,
                                           const Operands& in) {
  const int64_t m = p.rows;
  const int64_t n = p.cols;
  const std::vector<double> x = Load(in.inputs[0], p.dtype, p.batch * m * n);
  std::vector<double> out(x.size());
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        out[(b * n + j) * m + i] = x[(b * m + i) * n + j];
      }
    }
  }
  return {out};
}

std::vector<std::vector<double>> Reference(const GemmProblem& p,
                                           const Operands& in) {
  const int64_t m = p.m, n = p.n, k = p.k;
  const int64_t nb_a = p.stride_a == 0 ? 1 : p.batch;
  const int64_t nb_b = p.stride_b == 0 ? 1 : p.batch;
  const int64_t nb_c = p.stride_c == 0 ? 1 : p.batch;
  const std::vector<double> a_all =
      Load(in.inputs[kGemmA], p.dtype, nb_a * m * k);
  const std::vector<double> b_all =
      Load(in.inputs[kGemmB], p.dtype, nb_b * k * n);
  const std::vector<double> c_all =
      p.has_c ? Load(in.inputs[kGemmC], p.dtype, nb_c * m * n)
              : std::vector<double>();
  std::vector<double> d(p.batch * m * n);
  std::vector<double> a(m * k), b(k * n);
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    // op(A) as [m,k] and op(B) as [k,n], so the product is one i-k-j loop.
    const double* ab = a_all.data() + bi * p.stride_a;
    const double* bb = b_all.data() + bi * p.stride_b;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t l = 0; l < k; ++l) {
        a[i * k + l] = p.trans_a ? ab[l * m + i] : ab[i * k + l];
      }
    }
    for (int64_t l = 0; l < k; ++l) {
      for (int64_t j = 0; j < n; ++j) {
        b[l * n + j] = p.trans_b ? bb[j * k + l] : bb[l * n + j];
      }
    }
    double* db = d.data() + bi * m * n;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      double* row = db + i * n;
      for (int64_t l = 0; l < k; ++l) {
        const double ail = a[i * k + l];
        const double* brow = b.data() + l * n;
        for (int64_t j = 0; j < n; ++j) row[j] += ail * brow[j];
      }
      const double* crow =
          p.has_c ? c_all.data() + bi * p.stride_c + i * n : nullptr;
      for (int64_t j = 0; j < n; ++j) {
        row[j] = p.alpha * row[j] + (crow ? p.beta * crow[j] : 0.0);
      }
    }
  }
  return {d};
}

std::vector<std::vector<double>> Reference(const PermuteProblem& p,
                                           const Operands& in) {
  const int rank = static_cast<int>(p.in_shape.size());
  const int64_t total = NumElements(p.in_shape);
  const std::vector<double> x = Load(in.inputs[0], p.dtype, total);
  const Shape out_shape = PermutedShape(p.in_shape, p.perm);
  Shape in_stride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    in_stride[d] = in_stride[d + 1] * p.in_shape[d + 1];
  }
  std::vector<double> out(total);
  for (int64_t o = 0; o < total; ++o) {
    // Output index o -> coordinates -> input offset.
    int64_t rest = o;
    int64_t src = 0;
    for (int i = rank - 1; i >= 0; --i) {
      src += (rest % out_shape[i]) * in_stride[p.perm[i]];
      rest /= out_shape[i];
    }
    out[o] = x[src];
  }
  return {out};
}

std::vector<std::vector<double>> Reference(const GeluLnProblem& p,
                                           const Operands& in) {
  const int64_t rows = p.rows, hidden = p.hidden;
  const auto optional = [&](bool has, int operand, int64_t n, double absent) {
    return has ? Load(in.inputs[operand], p.dtype, n)
               : std::vector<double>(n, absent);
  };
  const std::vector<double> x = Load(in.inputs[kLnX], p.dtype, rows * hidden);
  const std::vector<double> bias = optional(p.has_bias, kLnBias, hidden, 0);
  const std::vector<double> res =
      optional(p.has_residual, kLnResidual, rows * hidden, 0);
  const std::vector<double> gamma = optional(p.has_gamma, kLnGamma, hidden, 1);
  const std::vector<double> beta = optional(p.has_beta, kLnBeta, hidden, 0);
  const double kPi = 3.14159265358979323846;
  std::vector<double> y(rows * hidden), h(rows * hidden);
  for (int64_t r = 0; r < rows; ++r) {
    double* hr = h.data() + r * hidden;
    double sum = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      const double v = x[r * hidden + j] + bias[j];
      const double g = p.approx == GeluApprox::kExact
                           ? 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))
                           : 0.5 * v *
                                 (1 + std::tanh(std::sqrt(2 / kPi) *
                                                (v + 0.044715 * v * v * v)));
      hr[j] = g + res[r * hidden + j];
      sum += hr[j];
    }
    const double mean = sum / hidden;
    double var = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      var += (hr[j] - mean) * (hr[j] - mean);
    }
    var /= hidden;
    const double rstd = 1 / std::sqrt(var + static_cast<double>(p.eps));
    for (int64_t j = 0; j < hidden; ++j) {
      y[r * hidden + j] = (hr[j] - mean) * rstd * gamma[j] + beta[j];
    }
  }
  if (!p.return_pre_norm) h.clear();
  return {y, h};
}

}  // namespace

std::vector<std::vector<double>> ReferenceOutputs(const Problem& p,
                                                  const Operands& host_inputs) {
  return std::visit(
      [&](const auto& typed) { return Reference(typed, host_inputs); }, p);
}

}  // namespace coalesce
