// transpose.cuda.vec16: 16-byte vectors, 32-column tiles (vec16.cu).
#include "kernels/cuda/transpose/transpose_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class TransposeVec16Variant final : public TransposeVariantBase {
 public:
  TransposeVec16Variant() : TransposeVariantBase(kVec16Transpose) {}
  absl::string_view name() const override { return "transpose.cuda.vec16"; }
  absl::string_view description() const override {
    return "16-byte loads and stores, 16-bit types paired into words, "
           "64-word-row conflict-free tile";
  }

 protected:
  double CallSeconds(int) const override { return 0.39e-6; }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeTransposeVec16Variant() {
  return std::make_unique<TransposeVec16Variant>();
}

}  // namespace coalesce::cuda
