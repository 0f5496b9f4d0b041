// The convert_layout op's CUDA variants. Every request is first collapsed
// (kernels/core/permute.h): NCHW->NHWC becomes [N, C, HW] -> [N, HW, C] and
// AoS->SoA [N, F] -> [F, N], so the transpose kernels serve most layouts.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

using LayoutBase =
    TypedVariant<PermuteProblem, OpKind::kConvertLayout, BackendKind::kCuda>;

CollapsedPermutation Collapse(const PermuteProblem& p) {
  return CollapsePermutation(p.in_shape, p.perm);
}

// Any permutation, by the general kernels.
class PermuteVariant final : public LayoutBase {
 public:
  explicit PermuteVariant(PermuteKernel k) : kernel_(k) {}
  absl::string_view name() const override {
    return kernel_ == PermuteKernel::kNaive ? "convert_layout.cuda.naive"
                                            : "convert_layout.cuda.tiled";
  }
  absl::string_view description() const override {
    return kernel_ == PermuteKernel::kNaive
               ? "one thread per output element, input offset by div/mod: "
                 "the baseline"
               : "collapse dims, then a 32x33 tile over the two innermost "
                 "dims, or a 16-byte run copy when the innermost dim stays";
  }

 protected:
  absl::Status CanImplementTyped(const PermuteProblem&,
                                 const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  double Efficiency(const Problem& p, const DeviceInfo&) const override {
    if (kernel_ == PermuteKernel::kNaive) return 0.2;
    const CollapsedPermutation c = Collapse(std::get<PermuteProblem>(p));
    const int k = static_cast<int>(c.perm.size());
    if (c.perm[k - 1] == k - 1) return 0.85;  // run copy
    // Transposing layouts of 16 MB and more in the H200 sweep of the
    // sixteenth session (kernels/cuda/testdata/layout_selection_seed*.txt):
    // a median of 0.51 of the copy peak, 0.33-0.59, where the vec16 and
    // tma variants reach 0.64 at the median. At 0.7 the heuristic picked
    // tiled over them at 1.4-1.7x their time (33x132x64x64, 64x24x64x64).
    return 0.5;
  }
  absl::Status RunTyped(const PermuteProblem& p, const Operands& ops,
                        ExecContext& ctx) const override {
    return LaunchPermute(kernel_, static_cast<int>(ElementSize(p.dtype)),
                         Collapse(p), ops.inputs[0], ops.outputs[0], ctx);
  }

 private:
  PermuteKernel kernel_;
};

// A layout variant's name suffix and description, by its transpose kernel.
struct LayoutDoc {
  const char* suffix;
  const char* description;
};

LayoutDoc LayoutDocOf(TransposeKernel k) {
  switch (k) {
    case TransposeKernel::kSmallDim:
      return {"small_dim",
              "collapsed batched transpose with a side <= 16 (C = 3 "
              "images, AoS records): both sides coalesced"};
    case TransposeKernel::kTma:
      return {"tma",
              "collapsed batched transpose by the TMA-fed transpose: "
              "persistent blocks, several input tiles in flight"};
    default:
      return {"vec16",
              "collapsed batched transpose by the 16-byte vec16 transpose"};
  }
}

// Permutations that collapse to a batched 2-D transpose.
class LayoutTransposeVariant final : public LayoutBase {
 public:
  explicit LayoutTransposeVariant(TransposeKernel k)
      : kernel_(k),
        name_(absl::StrCat("convert_layout.cuda.", LayoutDocOf(k).suffix)) {}
  absl::string_view name() const override { return name_; }
  absl::string_view description() const override {
    return LayoutDocOf(kernel_).description;
  }

 protected:
  absl::Status CanImplementTyped(const PermuteProblem& p,
                                 const DeviceInfo&) const override {
    TransposeShape s;
    if (!AsTranspose(p, &s)) {
      return absl::UnimplementedError(
          "the permutation does not collapse to a batched 2-D transpose");
    }
    return TransposeSupports(kernel_, s);
  }
  double Efficiency(const Problem& p, const DeviceInfo&) const override {
    TransposeShape s;
    AsTranspose(std::get<PermuteProblem>(p), &s);
    return TransposeEfficiency(kernel_, s);
  }
  absl::Status RunTyped(const PermuteProblem& p, const Operands& ops,
                        ExecContext& ctx) const override {
    TransposeShape s;
    AsTranspose(p, &s);
    return LaunchTranspose(kernel_, s, ops.inputs[0], ops.outputs[0], ctx);
  }

 private:
  static bool AsTranspose(const PermuteProblem& p, TransposeShape* s) {
    s->elem_bytes = static_cast<int>(ElementSize(p.dtype));
    return AsBatchedTranspose(Collapse(p), &s->batch, &s->rows, &s->cols);
  }
  TransposeKernel kernel_;
  std::string name_;
};

}  // namespace

std::unique_ptr<KernelVariant> MakePermuteVariant(PermuteKernel k) {
  return std::make_unique<PermuteVariant>(k);
}

std::unique_ptr<KernelVariant> MakeLayoutTransposeVariant(TransposeKernel k) {
  return std::make_unique<LayoutTransposeVariant>(k);
}

}  // namespace coalesce::cuda
