// convert_layout.cuda.small_dim: layouts that collapse to a batched transpose
// with a short side, on the small_dim kernel (transpose/small_dim.cu).
#include "kernels/cuda/layout/layout_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class LayoutSmallDimVariant final : public LayoutTransposeVariantBase {
 public:
  LayoutSmallDimVariant() : LayoutTransposeVariantBase(kSmallDimTranspose) {}
  absl::string_view name() const override {
    return "convert_layout.cuda.small_dim";
  }
  absl::string_view description() const override {
    return "collapsed batched transpose with a side <= 16 (C = 3 images, AoS "
           "records): both sides coalesced";
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeLayoutSmallDimVariant() {
  return std::make_unique<LayoutSmallDimVariant>();
}

}  // namespace coalesce::cuda
