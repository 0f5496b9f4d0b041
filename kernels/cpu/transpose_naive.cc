// transpose.cpu.naive: the baseline the blocked variant is measured against.
// Reads rows contiguously and writes columns with a stride of M elements,
// so every store touches a different cache line once M is large.
#include <cstdint>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/variants.h"

namespace coalesce::cpu {
namespace {

// Measured as for transpose.cpu.blocked: 0.2-0.27 of the nominal bandwidth
// while input and output fit in cache (up to about 8 MiB moved), 0.06-0.12
// beyond (square transposes of 2048 and 4096), 3-8x behind blocked.
constexpr double kNaiveEfficiencyInCache = 0.25;
constexpr double kNaiveEfficiencyOutOfCache = 0.08;
constexpr int64_t kNaiveInCacheBytes = int64_t{8} << 20;

template <typename T>
void TransposeNaive(const TransposeProblem& p, const T* in, T* out) {
  const int64_t m = p.rows;
  const int64_t n = p.cols;
  const bool parallel = 2 * p.batch * m * n * static_cast<int64_t>(sizeof(T)) >=
                        kParallelMinBytes;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < m; ++i) {
      const T* src = in + (b * m + i) * n;
      T* dst = out + b * m * n + i;
      for (int64_t j = 0; j < n; ++j) dst[j * m] = src[j];
    }
  }
}

class TransposeNaiveVariant final
    : public TypedVariant<TransposeProblem, OpKind::kTranspose,
                          BackendKind::kCpu> {
 public:
  absl::string_view name() const override { return "transpose.cpu.naive"; }
  absl::string_view description() const override {
    return "baseline: row-by-row loop with strided stores, OpenMP over rows";
  }

 protected:
  absl::Status CanImplementTyped(const TransposeProblem&,
                                 const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  absl::Status RunTyped(const TransposeProblem& p, const Operands& ops,
                        ExecContext&) const override {
    if (ElementSize(p.dtype) == 4) {
      TransposeNaive(p, static_cast<const uint32_t*>(ops.inputs[0]),
                     static_cast<uint32_t*>(ops.outputs[0]));
    } else {
      TransposeNaive(p, static_cast<const uint16_t*>(ops.inputs[0]),
                     static_cast<uint16_t*>(ops.outputs[0]));
    }
    return absl::OkStatus();
  }
  double Efficiency(const Problem& p, const DeviceInfo&) const override {
    return MinBytesMoved(p) <= kNaiveInCacheBytes ? kNaiveEfficiencyInCache
                                                  : kNaiveEfficiencyOutOfCache;
  }
};

}  // namespace

std::unique_ptr<KernelVariant> NewTransposeNaive() {
  return std::make_unique<TransposeNaiveVariant>();
}

}  // namespace coalesce::cpu
