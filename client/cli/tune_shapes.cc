#include "client/cli/tune_shapes.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace coalesce::cli {

std::vector<std::string> ShapeClasses(absl::string_view op) {
  if (op == "transpose") return {"2d", "batched"};
  if (op == "gemm") return {"plain", "transposed", "batched"};
  if (op == "layout") {
    return {"nchw_nhwc", "nhwc_nchw", "permutation", "aos_soa", "soa_aos"};
  }
  if (op == "gelu-ln") return {"default"};
  return {};
}

absl::StatusOr<std::vector<std::string>> RandomShapes(
    absl::string_view op, absl::string_view shape_class, int count,
    uint64_t seed, int64_t max_bytes, int element_bytes) {
  const std::vector<std::string> classes = ShapeClasses(op);
  if (classes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no random shapes for op '", op, "'"));
  }
  const std::string cls =
      shape_class.empty() ? classes[0] : std::string(shape_class);
  if (std::find(classes.begin(), classes.end(), cls) == classes.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shape_class=", cls, ": ", op, " has ",
                     absl::StrJoin(classes, ", ")));
  }
  std::mt19937_64 rng(seed);
  // Log-uniform in [lo, hi]; not aligned.
  auto log_uniform = [&](int64_t lo, int64_t hi) {
    std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
    return std::clamp<int64_t>(static_cast<int64_t>(std::exp(u(rng))), lo, hi);
  };
  auto size = [&](int64_t lo, int64_t hi) {
    std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
    int64_t v = static_cast<int64_t>(std::exp(u(rng)));
    // Half the shapes aligned to 64 (the common case), half odd-sized.
    if (rng() % 2 == 0) v = std::max<int64_t>(64, (v + 32) / 64 * 64);
    return std::clamp<int64_t>(v, lo, hi);
  };
  std::vector<std::string> out;
  while (static_cast<int>(out.size()) < count) {
    std::vector<int64_t> s;
    std::string settings;  // " flag=value" each
    int64_t elems = -1;    // -1: the product of s
    // The default classes first, drawn exactly as before classes existed.
    if (cls == "2d") {
      s = {size(1, 16384), size(1, 16384)};
    } else if (cls == "plain") {
      s = {size(1, 8192), size(1, 8192), size(1, 8192)};
      elems = s[0] * s[2] + s[2] * s[1] + s[0] * s[1];
    } else if (cls == "nchw_nhwc") {
      const int64_t c = rng() % 3 == 0 ? 3 : size(1, 512);
      const int64_t hw = size(1, 224);
      s = {size(1, 64), c, hw, hw};
    } else if (cls == "default") {
      s = {size(1, 32768), size(1, 16384)};
    } else if (cls == "batched" && op == "transpose") {
      const int64_t b = log_uniform(2, 512);
      s = {b, size(1, 8192), size(1, 8192)};
    } else if (cls == "transposed") {
      s = {size(1, 8192), size(1, 8192), size(1, 8192)};
      elems = s[0] * s[2] + s[2] * s[1] + s[0] * s[1];
      // At least one operand transposed: 1 A, 2 B, 3 both.
      const uint64_t t = 1 + rng() % 3;
      settings = absl::StrCat(" trans_a=", t & 1, " trans_b=", t >> 1);
    } else if (cls == "batched") {  // gemm
      const int64_t b = log_uniform(2, 512);
      s = {size(1, 4096), size(1, 4096), size(1, 4096)};
      elems = b * (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]);
      settings = absl::StrCat(" batch=", b);
    } else if (cls == "nhwc_nchw") {
      // The default class's draws, stored NHWC.
      const int64_t c = rng() % 3 == 0 ? 3 : size(1, 512);
      const int64_t hw = size(1, 224);
      s = {size(1, 64), hw, hw, c};
      settings = " from=NHWC to=NCHW";
    } else if (cls == "permutation") {
      const int rank = 3 + static_cast<int>(rng() % 3);
      const int64_t hi = rank == 3 ? 2048 : rank == 4 ? 256 : 64;
      for (int i = 0; i < rank; ++i) s.push_back(size(1, hi));
      std::vector<int64_t> perm(rank);
      for (int i = 0; i < rank; ++i) perm[i] = i;
      if (rng() % 8 == 0) {
        // A copy in disguise: two size-1 axes swapped, the others in order.
        const int i = static_cast<int>(rng() % rank);
        const int j = (i + 1 + static_cast<int>(rng() % (rank - 1))) % rank;
        s[i] = s[j] = 1;
        std::swap(perm[i], perm[j]);
      } else {
        for (int i = rank - 1; i > 0; --i) {
          std::swap(perm[i], perm[rng() % (i + 1)]);
        }
      }
      settings = absl::StrCat(" perm=", absl::StrJoin(perm, ","));
    } else {  // aos_soa, soa_aos: N records of F fields
      const int64_t f = 2 + static_cast<int64_t>(rng() % 31);
      const int64_t n = size(1, int64_t{1} << 22);
      if (cls == "aos_soa") {
        s = {n, f};
        settings = " direction=aos_to_soa";
      } else {
        s = {f, n};
        settings = " direction=soa_to_aos";
      }
    }
    if (elems < 0) {
      elems = 1;
      for (int64_t d : s) elems *= d;
    }
    if (elems * element_bytes > max_bytes) continue;
    out.push_back(absl::StrCat(absl::StrJoin(s, ","), settings));
  }
  return out;
}

absl::StatusOr<TuneShape> ParseTuneShape(absl::string_view text) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, ' ', absl::SkipEmpty());
  if (parts.empty()) return absl::InvalidArgumentError("empty tune shape");
  TuneShape t;
  for (absl::string_view d : absl::StrSplit(parts[0], ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(d, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tune shape '", text, "': '", d, "' is no integer"));
    }
    t.dims.push_back(v);
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
    if (kv.first.empty() || kv.second.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tune shape '", text, "': '", parts[i], "' is no flag=value"));
    }
    t.settings.push_back(std::move(kv));
  }
  return t;
}

}  // namespace coalesce::cli
