// Canonical form of a permutation: size-1 dimensions dropped and input
// dimensions that stay adjacent and in order in the output merged, so that
// NCHW->NHWC becomes the batched transpose [N, C, HW] -> [N, HW, C] and
// AoS->SoA the 2-D transpose [N, F] -> [F, N]. Every backend's layout
// variants start from this. Pure functions; thread-safe.
#pragma once

#include "kernels/core/problem.h"

namespace coalesce {

struct CollapsedPermutation {
  Shape in_shape;  // collapsed input dims
  Perm perm;       // out dim i = in dim perm[i]; rank >= 1
};

CollapsedPermutation CollapsePermutation(const Shape& in_shape,
                                         const Perm& perm);

// Output shape of a permutation.
Shape PermutedShape(const Shape& in_shape, const Perm& perm);

// True when the collapsed permutation is [B?, R, C] -> [B?, C, R]: a
// (batched) 2-D transpose. Fills batch/rows/cols (batch 1 if absent).
bool AsBatchedTranspose(const CollapsedPermutation& c, int64_t* batch,
                        int64_t* rows, int64_t* cols);

}  // namespace coalesce
