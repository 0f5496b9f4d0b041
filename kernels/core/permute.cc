#include "kernels/core/permute.h"

#include <algorithm>

namespace coalesce {

Shape PermutedShape(const Shape& in_shape, const Perm& perm) {
  Shape out;
  for (int p : perm) out.push_back(in_shape[p]);
  return out;
}

CollapsedPermutation CollapsePermutation(const Shape& in_shape,
                                         const Perm& perm) {
  const int rank = static_cast<int>(in_shape.size());
  // Drop size-1 dims: renumber the survivors.
  Perm keep_index(rank, -1);
  Shape shape1;
  for (int d = 0; d < rank; ++d) {
    if (in_shape[d] != 1) {
      keep_index[d] = static_cast<int>(shape1.size());
      shape1.push_back(in_shape[d]);
    }
  }
  Perm perm1;
  for (int p : perm) {
    if (keep_index[p] >= 0) perm1.push_back(keep_index[p]);
  }
  if (shape1.empty()) return {{1}, {0}};

  // Merge runs of output dims whose input dims are consecutive.
  // groups[g] = list of input dims (in order) forming collapsed out dim g.
  absl::InlinedVector<absl::InlinedVector<int, kMaxRank>, kMaxRank> groups;
  for (size_t i = 0; i < perm1.size(); ++i) {
    if (i > 0 && perm1[i] == perm1[i - 1] + 1) {
      groups.back().push_back(perm1[i]);
    } else {
      groups.push_back({perm1[i]});
    }
  }
  // Collapsed input dims are the groups ordered by their first input dim.
  const int ng = static_cast<int>(groups.size());
  Perm order(ng);
  for (int g = 0; g < ng; ++g) order[g] = g;
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return groups[a][0] < groups[b][0]; });
  Perm rank_of_group(ng);
  CollapsedPermutation c;
  for (int r = 0; r < ng; ++r) {
    rank_of_group[order[r]] = r;
    int64_t size = 1;
    for (int d : groups[order[r]]) size *= shape1[d];
    c.in_shape.push_back(size);
  }
  for (int g = 0; g < ng; ++g) c.perm.push_back(rank_of_group[g]);
  return c;
}

bool AsBatchedTranspose(const CollapsedPermutation& c, int64_t* batch,
                        int64_t* rows, int64_t* cols) {
  if (c.perm.size() == 2 && c.perm[0] == 1 && c.perm[1] == 0) {
    *batch = 1;
    *rows = c.in_shape[0];
    *cols = c.in_shape[1];
    return true;
  }
  if (c.perm.size() == 3 && c.perm[0] == 0 && c.perm[1] == 2 &&
      c.perm[2] == 1) {
    *batch = c.in_shape[0];
    *rows = c.in_shape[1];
    *cols = c.in_shape[2];
    return true;
  }
  return false;
}

}  // namespace coalesce
