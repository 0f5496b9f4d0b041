// transpose.cuda.tma: tiles read by the tensor memory accelerator (tma.cu).
#include "kernels/cuda/transpose/transpose_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class TransposeTmaVariant final : public TransposeVariantBase {
 public:
  TransposeTmaVariant() : TransposeVariantBase(kTmaTranspose) {}
  absl::string_view name() const override { return "transpose.cuda.tma"; }
  absl::string_view description() const override {
    return "256-byte tiles read by the tensor memory accelerator (swizzled 4-D "
           "boxes), 64 KB in flight per persistent block, 16-byte stores";
  }

 protected:
  double CallSeconds(int) const override { return kTmaCallSeconds; }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeTransposeTmaVariant() {
  return std::make_unique<TransposeTmaVariant>();
}

}  // namespace coalesce::cuda
