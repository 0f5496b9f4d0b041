// The bases of the convert_layout op's CUDA variants (layout/*_variant.cc).
// A request is first collapsed (kernels/core/permute.h): NCHW -> NHWC
// becomes [N, C, HW] -> [N, HW, C] and AoS -> SoA [N, F] -> [F, N].
// - LayoutPermuteVariantBase: any permutation, by a general kernel
//   (permute.h).
// - LayoutTransposeVariantBase: permutations that collapse to a batched 2-D
//   transpose, run by a transpose kernel (transpose/internal.h) as it would
//   run a transpose request; others are UNIMPLEMENTED. Unlike the transpose
//   op's variants, no device-dependent efficiency, and no call cost but
//   tma's (kTmaCallSeconds): vec16's made the layout sweeps' choices worse.
// A variant adds its name and description. Variants are stateless after
// construction; thread-safe.
#pragma once

#include "kernels/core/permute.h"
#include "kernels/core/variant.h"
#include "kernels/cuda/layout/permute.h"
#include "kernels/cuda/transpose/internal.h"

namespace coalesce::cuda {

using LayoutVariant =
    TypedVariant<PermuteProblem, OpKind::kConvertLayout, BackendKind::kCuda>;

class LayoutPermuteVariantBase : public LayoutVariant {
 protected:
  explicit LayoutPermuteVariantBase(const PermuteKernel& kernel)
      : kernel_(kernel) {}

  absl::Status CanImplementTyped(const PermuteProblem&,
                                 const DeviceInfo&) const final {
    return absl::OkStatus();
  }
  double Efficiency(const Problem& p, const DeviceInfo& dev) const final {
    const PermuteProblem& pp = std::get<PermuteProblem>(p);
    return kernel_.efficiency(Collapse(pp),
                              static_cast<int>(ElementSize(pp.dtype)), dev);
  }
  absl::Status RunTyped(const PermuteProblem& p, const Operands& ops,
                        ExecContext& ctx) const final {
    return kernel_.launch(static_cast<int>(ElementSize(p.dtype)), Collapse(p),
                          ops.inputs[0], ops.outputs[0], ctx);
  }

 private:
  static CollapsedPermutation Collapse(const PermuteProblem& p) {
    return CollapsePermutation(p.in_shape, p.perm);
  }

  PermuteKernel kernel_;
};

class LayoutTransposeVariantBase : public LayoutVariant {
 protected:
  explicit LayoutTransposeVariantBase(const TransposeKernel& kernel)
      : kernel_(kernel) {}

  absl::Status CanImplementTyped(const PermuteProblem& p,
                                 const DeviceInfo&) const final {
    TransposeShape s;
    if (!AsTranspose(p, &s)) {
      return absl::UnimplementedError(
          "the permutation does not collapse to a batched 2-D transpose");
    }
    return kernel_.supports(s);
  }
  double Efficiency(const Problem& p, const DeviceInfo&) const final {
    TransposeShape s;
    AsTranspose(std::get<PermuteProblem>(p), &s);
    return kernel_.efficiency(s);
  }
  absl::Status RunTyped(const PermuteProblem& p, const Operands& ops,
                        ExecContext& ctx) const final {
    TransposeShape s;
    AsTranspose(p, &s);
    return kernel_.launch(s, ops.inputs[0], ops.outputs[0], ctx);
  }

  static bool AsTranspose(const PermuteProblem& p, TransposeShape* s) {
    s->elem_bytes = static_cast<int>(ElementSize(p.dtype));
    return AsBatchedTranspose(CollapsePermutation(p.in_shape, p.perm),
                              &s->batch, &s->rows, &s->cols);
  }

 private:
  TransposeKernel kernel_;
};

}  // namespace coalesce::cuda
