// The shapes `coalesce tune` sweeps: random shapes of an op in one of its
// shape classes, and the text form of one tune shape ("DIMS[ flag=value]...",
// DIMS what --shape takes, or M,N,K for gemm, each flag=value an op flag
// that the shape sets: gemm's trans_a, trans_b and batch, layout's from, to,
// perm and direction). bench/sweep_shapes.py draws the same shapes bit for
// bit: change both together.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coalesce::cli {

// The shape classes of an op, its default first (the shapes tune drew
// before there were classes): transpose 2d, batched; gemm plain,
// transposed, batched; layout nchw_nhwc, nhwc_nchw, permutation, aos_soa,
// soa_aos; gelu-ln default. Empty for an unknown op.
std::vector<std::string> ShapeClasses(absl::string_view op);

// `count` random shapes of `op` in `shape_class` (empty: the default), as
// tune shapes: sizes log-uniform from tiny to large, about half aligned to
// 64, the largest tensor (gemm: A, B and D together) at most max_bytes of
// element_bytes-sized elements. The default classes draw what tune drew
// before classes existed, so old sweeps regenerate from their seed.
absl::StatusOr<std::vector<std::string>> RandomShapes(
    absl::string_view op, absl::string_view shape_class, int count,
    uint64_t seed, int64_t max_bytes, int element_bytes);

struct TuneShape {
  std::vector<int64_t> dims;
  std::vector<std::pair<std::string, std::string>> settings;  // flag, value
};

// Parses "DIMS[ flag=value]...": DIMS comma-separated integers.
absl::StatusOr<TuneShape> ParseTuneShape(absl::string_view text);

}  // namespace coalesce::cli
