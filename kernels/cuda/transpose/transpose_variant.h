// The base of the transpose op's CUDA variants (transpose/*_variant.cc):
// maps a TransposeProblem to the TransposeShape of its kernel (internal.h)
// and answers CanImplement, Efficiency and Run with that kernel's
// functions. A variant adds its name, description and call cost, and may
// scale the kernel's efficiency by the device. Variants are stateless after
// construction; thread-safe.
#pragma once

#include "kernels/core/variant.h"
#include "kernels/cuda/transpose/internal.h"

namespace coalesce::cuda {

class TransposeVariantBase
    : public TypedVariant<TransposeProblem, OpKind::kTranspose,
                          BackendKind::kCuda> {
 public:
  double EstimateSeconds(const Problem& p, const DeviceInfo& dev) const final {
    return KernelVariant::EstimateSeconds(p, dev) +
           CallSeconds(static_cast<int>(
               ElementSize(std::get<TransposeProblem>(p).dtype)));
  }

 protected:
  explicit TransposeVariantBase(const TransposeKernel& kernel)
      : kernel_(kernel) {}

  // What a call of elem_bytes-sized elements costs on top of naive's
  // float32 call, where the bytes take no time: for float32, the median
  // difference from naive's time over the H200 sweep's shapes under 1 MB
  // (kernels/cuda/testdata/transpose_selection_seed7.txt, from
  // TUNE_OPS=transpose scripts/gpu-check.sh OUT tune); the kernels launched
  // with an early start (vec16, vec16_wide, tma) pay 0.3-1 us for it there.
  // 16-bit costs differ only where the 16-bit sweeps' fit moved them.
  // selection_estimate_test checks the choices these costs give against
  // the sweeps.
  virtual double CallSeconds(int elem_bytes) const = 0;
  // The kernel's efficiency on s, on dev.
  virtual double ShapeEfficiency(const TransposeShape& s,
                                 const DeviceInfo& dev) const {
    return kernel_.efficiency(s);
  }

  absl::Status CanImplementTyped(const TransposeProblem& p,
                                 const DeviceInfo&) const final {
    return kernel_.supports(ShapeOf(p));
  }
  double Efficiency(const Problem& p, const DeviceInfo& dev) const final {
    return ShapeEfficiency(ShapeOf(std::get<TransposeProblem>(p)), dev);
  }
  absl::Status RunTyped(const TransposeProblem& p, const Operands& ops,
                        ExecContext& ctx) const final {
    return kernel_.launch(ShapeOf(p), ops.inputs[0], ops.outputs[0], ctx);
  }

 private:
  static TransposeShape ShapeOf(const TransposeProblem& p) {
    return {static_cast<int>(ElementSize(p.dtype)), p.batch, p.rows, p.cols};
  }

  TransposeKernel kernel_;
};

}  // namespace coalesce::cuda
