// convert_layout.cuda.small_dim: layouts that collapse to a batched transpose
// with a short side, on the small_dim kernel (transpose/small_dim.cu).
#include "kernels/cuda/layout/layout_variant.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

class LayoutSmallDimVariant final : public LayoutTransposeVariantBase {
 public:
  LayoutSmallDimVariant() : LayoutTransposeVariantBase(kSmallDimTranspose) {}
  absl::string_view name() const override {
    return "convert_layout.cuda.small_dim";
  }
  absl::string_view description() const override {
    return "collapsed batched transpose with a side <= 16 (C = 3 images, AoS "
           "records): both sides coalesced";
  }

 protected:
  // Off its register path a 2-D layout (AoS <-> SoA) gets a block per 8 KB
  // chunk, few blocks each working through a long chunk: of 3-60 KB they
  // measured 5.4-6.1 us on the H200 where naive and tiled took 3.7-4.3
  // and the register path 3.1-3.7 (kernels/cuda/testdata/
  // layout_classes_seed7.txt). Batched ones (NCHW <-> NHWC) have blocks
  // enough.
  double EstimateSeconds(const Problem& p,
                         const DeviceInfo& dev) const override {
    TransposeShape s;
    AsTranspose(std::get<PermuteProblem>(p), &s);
    const bool slow_shared_path = s.batch == 1 && !SmallDimInRegisters(s) &&
                                  s.rows * s.cols > kSharedPathMinElements;
    return LayoutTransposeVariantBase::EstimateSeconds(p, dev) +
           (slow_shared_path ? kSharedPathSeconds : 0.0);
  }

 private:
  static constexpr double kSharedPathSeconds = 2.0e-6;
  // Up to two passes of its 256 threads the path is as quick as the
  // register one: seed 7's 2-D layouts of up to 406 elements took 3.3-3.9
  // us, within 4% of the fastest variant on every one, from 885 elements
  // 4.4-6.1 (a grid on seed 7: 384 to 768 alike, 256 and 1024 worse).
  static constexpr int64_t kSharedPathMinElements = 512;
};

}  // namespace

std::unique_ptr<KernelVariant> MakeLayoutSmallDimVariant() {
  return std::make_unique<LayoutSmallDimVariant>();
}

}  // namespace coalesce::cuda
