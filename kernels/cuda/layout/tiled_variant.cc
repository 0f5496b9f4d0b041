// convert_layout.cuda.tiled: any permutation, by a shared-memory tile or a run
// copy (permute.cu).
#include "kernels/cuda/layout/layout_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class LayoutTiledVariant final : public LayoutPermuteVariantBase {
 public:
  LayoutTiledVariant() : LayoutPermuteVariantBase(kTiledPermute) {}
  absl::string_view name() const override {
    return "convert_layout.cuda.tiled";
  }
  absl::string_view description() const override {
    return "collapse dims, then a 32x33 tile over the two innermost dims, or a "
           "copy of whole rows in pieces of up to 16 bytes when the innermost "
           "dim stays";
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeLayoutTiledVariant() {
  return std::make_unique<LayoutTiledVariant>();
}

}  // namespace coalesce::cuda
