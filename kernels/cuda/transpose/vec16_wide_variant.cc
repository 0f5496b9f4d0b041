// transpose.cuda.vec16_wide: 16-byte vectors, 64-column tiles (vec16.cu).
#include "kernels/cuda/transpose/transpose_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class TransposeVec16WideVariant final : public TransposeVariantBase {
 public:
  TransposeVec16WideVariant() : TransposeVariantBase(kVec16WideTranspose) {}
  absl::string_view name() const override {
    return "transpose.cuda.vec16_wide";
  }
  absl::string_view description() const override {
    return "vec16 with 64-column tiles: 128-byte row segments for 16-bit "
           "types, twice the bytes in flight per thread";
  }

 protected:
  // 16-bit: fitted on the seed-7 shapes of the 16-bit sweeps
  // (kernels/cuda/testdata/transpose_classes_seed7.txt) with naive's: a few
  // microseconds' transposes ran 0.5-0.7 us slower here than on vec16.
  double CallSeconds(int elem_bytes) const override {
    return elem_bytes == 2 ? 0.6e-6 : 0.29e-6;
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeTransposeVec16WideVariant() {
  return std::make_unique<TransposeVec16WideVariant>();
}

}  // namespace coalesce::cuda
