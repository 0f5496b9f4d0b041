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
  double CallSeconds() const override { return 0; }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeTransposeNaiveVariant() {
  return std::make_unique<TransposeNaiveVariant>();
}

}  // namespace coalesce::cuda
