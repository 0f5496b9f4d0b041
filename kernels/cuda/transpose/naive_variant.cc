// transpose.cuda.naive: the reference the other transposes are measured against
// (basic.cu).
#include "kernels/cuda/transpose/transpose_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class TransposeNaiveVariant final : public TransposeVariantBase {
 public:
  TransposeNaiveVariant() : TransposeVariantBase(kNaiveTranspose) {}
  absl::string_view name() const override { return "transpose.cuda.naive"; }
  absl::string_view description() const override {
    return "uncoalesced reference: coalesced reads, strided writes, one thread "
           "per element";
  }

 protected:
  // 16-bit: fitted on the seed-7 shapes of the 16-bit sweeps
  // (kernels/cuda/testdata/transpose_classes_seed7.txt) with vec16_wide's.
  double CallSeconds(int elem_bytes) const override {
    return elem_bytes == 2 ? 0.1e-6 : 0;
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeTransposeNaiveVariant() {
  return std::make_unique<TransposeNaiveVariant>();
}

}  // namespace coalesce::cuda
