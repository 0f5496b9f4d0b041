// convert_layout.cuda.naive: any permutation, one thread per output element
// (permute.cu).
#include "kernels/cuda/layout/layout_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class LayoutNaiveVariant final : public LayoutPermuteVariantBase {
 public:
  LayoutNaiveVariant() : LayoutPermuteVariantBase(kNaivePermute) {}
  absl::string_view name() const override {
    return "convert_layout.cuda.naive";
  }
  absl::string_view description() const override {
    return "one thread per output element, input offset by div/mod: the "
           "baseline";
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeLayoutNaiveVariant() {
  return std::make_unique<LayoutNaiveVariant>();
}

}  // namespace coalesce::cuda
