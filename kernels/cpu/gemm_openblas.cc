// gemm.cpu.openblas: batched D = alpha * op(A) * op(B) + beta * C through
// OpenBLAS's row-major sgemm, one call per batch entry (each call is itself
// multithreaded). 16-bit operands are widened to float32 in parallel first
// and D rounded back at the end, so accumulation is float32 as on the GPU.
#include <cblas.h>

#include <climits>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/variants.h"

namespace coalesce::cpu {
namespace {

// Fractions of the nominal 96 GFLOP/s per thread (CpuDeviceInfo) that
// OpenBLAS 0.3.21 sgemm reached for m=n=k of 64, 256 and 1000 on the dev VM
// (0.32-0.36, one thread); the 16-bit path adds two conversions and an
// extra pass over D (0.13-0.32).
constexpr double kFloat32Efficiency = 0.35;
constexpr double kConvertedEfficiency = 0.25;

class GemmOpenBlasVariant final
    : public TypedVariant<GemmProblem, OpKind::kGemm, BackendKind::kCpu> {
 public:
  absl::string_view name() const override { return "gemm.cpu.openblas"; }
  absl::string_view description() const override {
    return "OpenBLAS cblas_sgemm per batch entry; float16/bfloat16 widened to "
           "float32 and D rounded back";
  }

 protected:
  absl::Status CanImplementTyped(const GemmProblem& p,
                                 const DeviceInfo&) const override {
    if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX) {
      return absl::UnimplementedError(
          "gemm.cpu.openblas: m, n and k must fit OpenBLAS's 32-bit int");
    }
    // The operands hold batch matrices when their stride is nonzero
    // (OperandBytes), so a larger stride would read past them.
    const struct {
      const char* name;
      int64_t stride;
      int64_t elements;
    } strides[] = {{"stride_a", p.stride_a, p.m * p.k},
                   {"stride_b", p.stride_b, p.k * p.n},
                   {"stride_c", p.has_c ? p.stride_c : 0, p.m * p.n}};
    for (const auto& s : strides) {
      if (p.batch > 1 && (s.stride < 0 || s.stride > s.elements)) {
        return absl::UnimplementedError(absl::StrCat(
            "gemm.cpu.openblas: ", s.name, " must be 0 or at most ", s.elements,
            " (one matrix), not ", s.stride));
      }
    }
    return absl::OkStatus();
  }

  absl::Status RunTyped(const GemmProblem& p, const Operands& ops,
                        ExecContext&) const override {
    const int64_t a_elems = p.m * p.k;
    const int64_t b_elems = p.k * p.n;
    const int64_t d_elems = p.m * p.n;
    const bool widen = p.dtype != DType::kFloat32;
    const size_t es = ElementSize(p.dtype);

    // float32 views of the operands: the caller's buffers, or widened copies.
    std::vector<float> a_buf, b_buf, d_buf;
    const float* a = static_cast<const float*>(ops.inputs[kGemmA]);
    const float* b = static_cast<const float*>(ops.inputs[kGemmB]);
    float* d = static_cast<float*>(ops.outputs[kGemmD]);
    if (widen) {
      a_buf.resize((p.stride_a == 0 ? 1 : p.batch) * a_elems);
      b_buf.resize((p.stride_b == 0 ? 1 : p.batch) * b_elems);
      d_buf.resize(p.batch * d_elems);
      ToFloat(ops.inputs[kGemmA], p.dtype, a_buf.size(), a_buf.data());
      ToFloat(ops.inputs[kGemmB], p.dtype, b_buf.size(), b_buf.data());
      a = a_buf.data();
      b = b_buf.data();
      d = d_buf.data();
    }
    // sgemm's C argument is D: seed it with C and let beta scale it.
    if (p.has_c) {
      const char* c = static_cast<const char*>(ops.inputs[kGemmC]);
      for (int64_t i = 0; i < p.batch; ++i) {
        const char* ci = c + i * p.stride_c * es;
        if (widen) {
          ToFloat(ci, p.dtype, d_elems, d + i * d_elems);
        } else {
          std::memcpy(d + i * d_elems, ci, d_elems * sizeof(float));
        }
      }
    }
    const int m = static_cast<int>(p.m);
    const int n = static_cast<int>(p.n);
    const int k = static_cast<int>(p.k);
    const float beta = p.has_c ? p.beta : 0.0f;
    for (int64_t i = 0; i < p.batch; ++i) {
      cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans,
                  p.trans_b ? CblasTrans : CblasNoTrans, m, n, k, p.alpha,
                  a + i * p.stride_a, p.trans_a ? m : k, b + i * p.stride_b,
                  p.trans_b ? k : n, beta, d + i * d_elems, n);
    }
    if (widen) FromFloat(d, p.dtype, d_buf.size(), ops.outputs[kGemmD]);
    return absl::OkStatus();
  }

  double Efficiency(const Problem& p, const DeviceInfo&) const override {
    return std::get<GemmProblem>(p).dtype == DType::kFloat32
               ? kFloat32Efficiency
               : kConvertedEfficiency;
  }
};

}  // namespace

std::unique_ptr<KernelVariant> NewGemmOpenBlas() {
  return std::make_unique<GemmOpenBlasVariant>();
}

}  // namespace coalesce::cpu
