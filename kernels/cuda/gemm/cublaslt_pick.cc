#include "kernels/cuda/gemm/cublaslt_pick.h"

namespace coalesce::cuda {

bool LtMayAvoidSplitK(DType dtype, bool tf32) {
  return dtype == DType::kFloat32 && !tf32;
}

bool LtAvoidsSplitK(DType dtype, bool tf32, int64_t k, const LtOffer& first) {
  if (!LtMayAvoidSplitK(dtype, tf32)) return false;
  if (k <= kLtNoSplitMaxK || first.split_k >= kLtNoSplitMinFirstSplits) {
    return true;
  }
  return k <= kLtWideNoSplitMaxK &&
         (first.waves >= kLtNoSplitMinWaves ||
          (first.split_k > 1 && k < kLtNoSplitMinStepsPerSplit *
                                        static_cast<int64_t>(first.split_k)));
}

int PickLtAlgorithm(absl::Span<const LtOffer> offers, bool avoid_split) {
  if (!avoid_split) return 0;
  int fewest = 0;
  for (int i = 0; i < static_cast<int>(offers.size()); ++i) {
    if (offers[i].split_k <= 1) return i;
    if (offers[i].split_k < offers[fewest].split_k) fewest = i;
  }
  return fewest;
}

}  // namespace coalesce::cuda
