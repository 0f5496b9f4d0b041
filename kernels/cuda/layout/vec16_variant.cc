// convert_layout.cuda.vec16: layouts that collapse to a batched transpose, on
// the vec16 kernel (transpose/vec16.cu).
#include "kernels/cuda/layout/layout_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class LayoutVec16Variant final : public LayoutTransposeVariantBase {
 public:
  LayoutVec16Variant() : LayoutTransposeVariantBase(kVec16Transpose) {}
  absl::string_view name() const override {
    return "convert_layout.cuda.vec16";
  }
  absl::string_view description() const override {
    return "collapsed batched transpose by the 16-byte vec16 transpose";
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeLayoutVec16Variant() {
  return std::make_unique<LayoutVec16Variant>();
}

}  // namespace coalesce::cuda
