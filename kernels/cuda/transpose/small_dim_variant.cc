// transpose.cuda.small_dim: one short side (small_dim.cu).
#include "kernels/cuda/transpose/transpose_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class TransposeSmallDimVariant final : public TransposeVariantBase {
 public:
  TransposeSmallDimVariant() : TransposeVariantBase(kSmallDimTranspose) {}
  absl::string_view name() const override { return "transpose.cuda.small_dim"; }
  absl::string_view description() const override {
    return "one side <= 16: a contiguous run on one side, short runs on the "
           "other, gathered in shared memory; 16-byte accesses";
  }

 protected:
  // Its median is 0: on small shapes the block count below sets its cost.
  double CallSeconds(int) const override { return 0; }
  double ShapeEfficiency(const TransposeShape& s,
                         const DeviceInfo& dev) const override {
    return TransposeVariantBase::ShapeEfficiency(s, dev) *
           SmallDimBlockFactor(s, dev.multiprocessors);
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeTransposeSmallDimVariant() {
  return std::make_unique<TransposeSmallDimVariant>();
}

}  // namespace coalesce::cuda
