// Which of cuBLASLt's heuristic algorithms a gemm.cuda.cublaslt plan takes,
// shared with coalesce-cublaslt-algos so that the tool marks the variant's
// pick among the algorithms it times. CUDA-free.
//
// Float32 without TF32: the heuristic's first algorithm often splits K far
// past what K holds (7x134x128: 264 splits, 54.6 us on the H200; 64x137x64
// with B transposed: 88 splits, 28.8 us) where an unsplit one of its first
// kLtHeuristicResults took 5-7 us (`coalesce-cublaslt-algos` over
// bench/cublaslt_shapes.txt). So with K <= kLtNoSplitMaxK, and with K <=
// kLtWideNoSplitMaxK where the first algorithm fills at least
// kLtNoSplitMinWaves of the GPU (its split made CTAs enough: 4755x2x137,
// 18 splits, 3.4 waves, 24.6 us on an H100 against 8.1 unsplit) or leaves
// each split fewer than kLtNoSplitMinStepsPerSplit steps of K (64x168x136
// with B transposed: 88 splits, 28.9 us against 6.8), the first unsplit
// one is taken, or, where all of them split, the first of the least
// workspace (7x134x128: 15 KB and 7.3 us against 4.3 MB).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "base/dtype.h"

namespace coalesce::cuda {

inline constexpr int kLtHeuristicResults = 8;
inline constexpr int64_t kLtNoSplitMaxK = 128;
inline constexpr int64_t kLtWideNoSplitMaxK = 512;
inline constexpr float kLtNoSplitMinWaves = 0.2f;
inline constexpr int64_t kLtNoSplitMinStepsPerSplit = 2;

// What the pick looks at in one of the heuristic's algorithms.
struct LtOffer {
  int32_t split_k = 1;  // CUBLASLT_ALGO_CONFIG_SPLITK_NUM; <= 1: unsplit
  size_t workspace = 0;
  float waves = 0;  // the heuristic's wavesCount
};

// Whether a plan of this dtype, TF32 permission and K may avoid split-K
// algorithms, and so asks the heuristic for kLtHeuristicResults of them.
bool LtMayAvoidSplitK(DType dtype, bool tf32, int64_t k);

// Whether it does, given the heuristic's first algorithm.
bool LtAvoidsSplitK(DType dtype, bool tf32, int64_t k, const LtOffer& first);

// The index in offers (the heuristic's order, best first; not empty) of the
// algorithm a plan takes: the first, or with avoid_split the first unsplit
// one, else the first of the least workspace.
int PickLtAlgorithm(absl::Span<const LtOffer> offers, bool avoid_split);

}  // namespace coalesce::cuda
