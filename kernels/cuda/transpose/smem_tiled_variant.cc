// transpose.cuda.smem_tiled: the unpadded shared-memory tile (basic.cu).
#include "kernels/cuda/transpose/transpose_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class TransposeSmemTiledVariant final : public TransposeVariantBase {
 public:
  TransposeSmemTiledVariant() : TransposeVariantBase(kSmemTiledTranspose) {}
  absl::string_view name() const override {
    return "transpose.cuda.smem_tiled";
  }
  absl::string_view description() const override {
    return "32x32 shared-memory tile without padding: coalesced both ways, "
           "32-way bank conflicts on the column read";
  }

 protected:
  double CallSeconds(int) const override { return 0.35e-6; }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeTransposeSmemTiledVariant() {
  return std::make_unique<TransposeSmemTiledVariant>();
}

}  // namespace coalesce::cuda
