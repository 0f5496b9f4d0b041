// gelu_layer_norm.cpu.fused: one pass over a row computes
// h = gelu(x + bias) + residual into a row buffer that stays in L1/L2, then
// mean and variance (two passes over the buffer, not E[h^2] - E[h]^2, which
// cancels catastrophically for rows with a large mean) and the normalized,
// scaled output. x, residual and the outputs are each touched once in
// memory; rows run in parallel.
//
// Elementwise arithmetic is float32, as on the GPU. The row sums and the
// centring use double: on a CPU this costs nothing measurable next to erf,
// and it keeps the fallback backend well inside the tolerance when a row's
// mean is large against its spread.
#include <cmath>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/variants.h"

namespace coalesce::cpu {
namespace {

// Fractions of the nominal copy bandwidth reached on the dev VM (one
// thread, 256x4096 and 4096x768, all operands): the kernel is bound by
// erfc/exp, about 20 ns (exact) or 7 ns (tanh) per float32 element, far
// from the ~2 ns that moving its bytes takes. 16-bit rows move half the
// bytes in about the same time (the software conversions cost more).
constexpr double kExactEfficiency = 0.05;
constexpr double kTanhEfficiency = 0.15;
constexpr double kSixteenBitFactor = 0.5;

// 0.5 v (1 + erf(v / sqrt 2)), written with erfc so that the tail for
// negative v (where 1 + erf cancels) keeps full relative precision.
inline float GeluErf(float v) {
  return 0.5f * v * std::erfc(v * -0.70710678118654752f);
}

// 0.5 v (1 + tanh(z)) = v / (1 + exp(-2z)), z = sqrt(2/pi) (v + 0.044715 v^3);
// the second form has no cancellation for negative z and saturates cleanly.
inline float GeluTanh(float v) {
  const float z = 0.79788456080286536f * (v + 0.044715f * v * v * v);
  return v / (1.0f + std::exp(-2.0f * z));
}

// A [hidden] parameter vector widened once; empty when absent.
std::vector<float> Widen(const void* src, DType t, int64_t n) {
  std::vector<float> out;
  if (src != nullptr) {
    out.resize(n);
    ToFloat(src, t, n, out.data());
  }
  return out;
}

template <typename Tag>
void GeluLnRows(const GeluLnProblem& p, const Operands& ops) {
  using T = typename Tag::Storage;
  const int64_t hidden = p.hidden;
  const T* x = static_cast<const T*>(ops.inputs[kLnX]);
  const T* residual =
      p.has_residual ? static_cast<const T*>(ops.inputs[kLnResidual]) : nullptr;
  T* y = static_cast<T*>(ops.outputs[kLnY]);
  T* h_out = p.return_pre_norm ? static_cast<T*>(ops.outputs[kLnH]) : nullptr;
  const std::vector<float> bias =
      Widen(p.has_bias ? ops.inputs[kLnBias] : nullptr, p.dtype, hidden);
  const std::vector<float> gamma =
      Widen(p.has_gamma ? ops.inputs[kLnGamma] : nullptr, p.dtype, hidden);
  const std::vector<float> beta =
      Widen(p.has_beta ? ops.inputs[kLnBeta] : nullptr, p.dtype, hidden);
  const bool use_tanh = p.approx == GeluApprox::kTanh;
  const int64_t bytes =
      2 * p.rows * hidden * static_cast<int64_t>(ElementSize(p.dtype));

#pragma omp parallel if (bytes >= kParallelMinBytes)
  {
    std::vector<float> h(hidden);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) {
      const T* xr = x + r * hidden;
      double sum = 0;
      for (int64_t j = 0; j < hidden; ++j) {
        float v = Tag::Load(xr[j]);
        if (!bias.empty()) v += bias[j];
        float g = use_tanh ? GeluTanh(v) : GeluErf(v);
        if (residual != nullptr) g += Tag::Load(residual[r * hidden + j]);
        h[j] = g;
        sum += g;
      }
      const double mean = sum / hidden;
      double squares = 0;
      for (int64_t j = 0; j < hidden; ++j) {
        const double d = h[j] - mean;
        squares += d * d;
      }
      const double rstd = 1.0 / std::sqrt(squares / hidden + p.eps);
      T* yr = y + r * hidden;
      for (int64_t j = 0; j < hidden; ++j) {
        float n = static_cast<float>((h[j] - mean) * rstd);
        if (!gamma.empty()) n *= gamma[j];
        if (!beta.empty()) n += beta[j];
        yr[j] = Tag::Store(n);
      }
      if (h_out != nullptr) {
        T* hr = h_out + r * hidden;
        for (int64_t j = 0; j < hidden; ++j) hr[j] = Tag::Store(h[j]);
      }
    }
  }
}

class GeluLayerNormFusedVariant final
    : public TypedVariant<GeluLnProblem, OpKind::kGeluLayerNorm,
                          BackendKind::kCpu> {
 public:
  absl::string_view name() const override {
    return "gelu_layer_norm.cpu.fused";
  }
  absl::string_view description() const override {
    return "bias+GELU+residual into a row buffer, two-pass mean/variance, "
           "affine; OpenMP over rows";
  }

 protected:
  absl::Status CanImplementTyped(const GeluLnProblem&,
                                 const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  absl::Status RunTyped(const GeluLnProblem& p, const Operands& ops,
                        ExecContext&) const override {
    DispatchDType(p.dtype,
                  [&](auto tag) { GeluLnRows<decltype(tag)>(p, ops); });
    return absl::OkStatus();
  }
  double Efficiency(const Problem& problem, const DeviceInfo&) const override {
    const auto& p = std::get<GeluLnProblem>(problem);
    const double e =
        p.approx == GeluApprox::kTanh ? kTanhEfficiency : kExactEfficiency;
    return p.dtype == DType::kFloat32 ? e : e * kSixteenBitFactor;
  }
};

}  // namespace

std::unique_ptr<KernelVariant> NewGeluLayerNormFused() {
  return std::make_unique<GeluLayerNormFusedVariant>();
}

}  // namespace coalesce::cpu
