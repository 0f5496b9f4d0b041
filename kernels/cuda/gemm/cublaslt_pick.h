// Which of cuBLASLt's heuristic algorithms a gemm.cuda.cublaslt plan takes,
// shared with coalesce-cublaslt-algos so that the tool marks the variant's
// pick among the algorithms it times. CUDA-free.
//
// Float32 without TF32: the heuristic's first algorithm often splits K far
// past what K holds (7x134x128: 264 splits, 54.6 us on the H200; 64x137x64
// with B transposed: 88 splits, 28.8 us) where an unsplit one of its first
// kLtHeuristicResults took 5-7 us (`coalesce-cublaslt-algos` over
// bench/cublaslt_shapes.txt). So the plan takes the first unsplit one, or,
// where all of them split, the first of the fewest splits, when:
// - K <= kLtNoSplitMaxK;
// - K <= kLtWideNoSplitMaxK and the first algorithm fills at least
//   kLtNoSplitMinWaves of the GPU (its split made CTAs enough: 4755x2x137,
//   18 splits, 3.4 waves, 24.6 us on an H100 against 8.1 unsplit) or leaves
//   each split fewer than kLtNoSplitMinStepsPerSplit steps of K (64x168x136
//   with B transposed: 88 splits, 28.9 us against 6.8);
// - or, at any K, the first algorithm splits K kLtNoSplitMinFirstSplits ways
//   or more: outputs of a few thousand elements (M of 4-32, N of 64-256)
//   draw 264 splits at every K from 64 to 4096, 52-56 us on an H100 where
//   the heuristic's 33-split offer takes 7-9 us (every first offer of the
//   H100's timed sets split 132 ways or fewer otherwise).
// The fewest splits, not the least workspace: 16x192x512 offers a 264-split
// algorithm with 48 bytes of workspace that took 110.5 us against 7.7 for
// the 33-split one (bench/results/h100/cublaslt-small-output.txt).
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
inline constexpr int32_t kLtNoSplitMinFirstSplits = 256;

// What the pick looks at in one of the heuristic's algorithms.
struct LtOffer {
  int32_t split_k = 1;  // CUBLASLT_ALGO_CONFIG_SPLITK_NUM; <= 1: unsplit
  size_t workspace = 0;
  float waves = 0;  // the heuristic's wavesCount
};

// Whether a plan of this dtype and TF32 permission may avoid split-K
// algorithms, and so asks the heuristic for kLtHeuristicResults of them.
bool LtMayAvoidSplitK(DType dtype, bool tf32);

// Whether it does, given the heuristic's first algorithm.
bool LtAvoidsSplitK(DType dtype, bool tf32, int64_t k, const LtOffer& first);

// The index in offers (the heuristic's order, best first; not empty) of the
// algorithm a plan takes: the first, or with avoid_split the first unsplit
// one, else the first of the fewest splits.
int PickLtAlgorithm(absl::Span<const LtOffer> offers, bool avoid_split);

}  // namespace coalesce::cuda
