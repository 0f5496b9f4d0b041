// convert_layout.cuda.tma: layouts that collapse to a batched transpose, on the
// tma kernel (transpose/tma.cu).
#include "kernels/cuda/layout/layout_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class LayoutTmaVariant final : public LayoutTransposeVariantBase {
 public:
  LayoutTmaVariant() : LayoutTransposeVariantBase(kTmaTranspose) {}
  absl::string_view name() const override { return "convert_layout.cuda.tma"; }
  absl::string_view description() const override {
    return "collapsed batched transpose by the TMA-fed transpose: persistent "
           "blocks, several input tiles in flight";
  }
  double EstimateSeconds(const Problem& p,
                         const DeviceInfo& dev) const override {
    return LayoutTransposeVariantBase::EstimateSeconds(p, dev) +
           kTmaCallSeconds;
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeLayoutTmaVariant() {
  return std::make_unique<LayoutTmaVariant>();
}

}  // namespace coalesce::cuda
