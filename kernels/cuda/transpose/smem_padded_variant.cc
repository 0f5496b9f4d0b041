// transpose.cuda.smem_padded: the padded shared-memory tile (basic.cu).
#include "kernels/cuda/transpose/transpose_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class TransposeSmemPaddedVariant final : public TransposeVariantBase {
 public:
  TransposeSmemPaddedVariant() : TransposeVariantBase(kSmemPaddedTranspose) {}
  absl::string_view name() const override {
    return "transpose.cuda.smem_padded";
  }
  absl::string_view description() const override {
    return "32x33 shared-memory tile: no bank conflicts";
  }

 protected:
  double CallSeconds(int) const override { return 0.13e-6; }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeTransposeSmemPaddedVariant() {
  return std::make_unique<TransposeSmemPaddedVariant>();
}

}  // namespace coalesce::cuda
