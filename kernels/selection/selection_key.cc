#include "kernels/selection/selection_key.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/core/permute.h"

namespace coalesce {
namespace {

// Largest power of two (up to 16) dividing x: the alignment class that
// decides 16-byte vector eligibility (4 float32 or 8 16-bit elements).
int AlignClass(int64_t x) {
  int a = 1;
  while (a < 16 && x % (2 * a) == 0) a *= 2;
  return a;
}

struct ShapeKeyVisitor {
  std::string operator()(const TransposeProblem& p) const {
    return absl::StrCat("transpose|", DTypeName(p.dtype), "|b",
                        Log2Bucket(p.batch), "|r", Log2Bucket(p.rows), "|c",
                        Log2Bucket(p.cols), "|a", AlignClass(p.rows), ".",
                        AlignClass(p.cols));
  }
  std::string operator()(const GemmProblem& p) const {
    return absl::StrCat(
        "gemm|", DTypeName(p.dtype), p.allow_tf32 ? "|tf32" : "", "|b",
        Log2Bucket(p.batch), "|m", Log2Bucket(p.m), "|n", Log2Bucket(p.n), "|k",
        Log2Bucket(p.k), "|a", AlignClass(p.m), ".", AlignClass(p.n), ".",
        AlignClass(p.k), "|t", p.trans_a ? 1 : 0, p.trans_b ? 1 : 0,
        p.has_c ? "|c" : "", p.stride_a == 0 && p.batch > 1 ? "|bcastA" : "",
        p.stride_b == 0 && p.batch > 1 ? "|bcastB" : "");
  }
  std::string operator()(const PermuteProblem& p) const {
    const CollapsedPermutation c = CollapsePermutation(p.in_shape, p.perm);
    std::vector<std::string> dims;
    for (int64_t d : c.in_shape) {
      // Short dims (<= 16) are kept exact: they pick the small-dim kernels.
      dims.push_back(d <= 16 ? absl::StrCat("=", d)
                             : absl::StrCat(Log2Bucket(d), "a", AlignClass(d)));
    }
    return absl::StrCat("convert_layout|", DTypeName(p.dtype), "|p",
                        absl::StrJoin(c.perm, "."), "|s",
                        absl::StrJoin(dims, "."));
  }
  std::string operator()(const GeluLnProblem& p) const {
    return absl::StrCat("gelu_layer_norm|", DTypeName(p.dtype), "|h",
                        Log2Bucket(p.hidden), "a", AlignClass(p.hidden), "|r",
                        Log2Bucket(p.rows), p.return_pre_norm ? "|pre" : "");
  }
};

}  // namespace

int Log2Bucket(int64_t x) {
  int b = 0;
  while ((int64_t{1} << b) < x && b < 62) ++b;
  return b;
}

std::string ShapeKey(const Problem& p) {
  return std::visit(ShapeKeyVisitor{}, p);
}

std::string DeviceKey(const DeviceInfo& d) {
  return absl::StrCat(d.name, "|", d.cc_major, ".", d.cc_minor);
}

std::string VariantSetVersion(const VariantRegistry& r, OpKind op) {
  // FNV-1a over the names in registration order, each followed by
  // "#revision" where the revision is above 0.
  uint64_t h = 1469598103934665603ULL;
  const auto mix = [&h](absl::string_view bytes) {
    for (char ch : bytes) {
      h ^= static_cast<unsigned char>(ch);
      h *= 1099511628211ULL;
    }
  };
  for (const KernelVariant* v : r.All()) {
    if (v->op() != op) continue;
    mix(v->name());
    if (v->revision() > 0) mix(absl::StrCat("#", v->revision()));
    h ^= 0xff;
    h *= 1099511628211ULL;
  }
  return absl::StrFormat("v%08x", static_cast<uint32_t>(h ^ (h >> 32)));
}

std::string VariantSetVersions(const VariantRegistry& r) {
  std::string out;
  for (OpKind op : kAllOps) {
    absl::StrAppend(&out, out.empty() ? "" : ",", OpName(op), "=",
                    VariantSetVersion(r, op));
  }
  return out;
}

std::string SelectionKey(const Problem& p, const DeviceInfo& d,
                         absl::string_view variant_set_version) {
  return absl::StrCat(ShapeKey(p), "|", DeviceKey(d), "|", variant_set_version);
}

std::optional<OpKind> OpOfKey(absl::string_view key) {
  const absl::string_view name = key.substr(0, key.find('|'));
  for (OpKind op : kAllOps) {
    if (OpName(op) == name) return op;
  }
  return std::nullopt;
}

absl::string_view DeviceOfKey(absl::string_view key) {
  // ShapeKey's fields|device name|compute capability|version.
  const size_t version = key.rfind('|');
  if (version == absl::string_view::npos || version == 0) return {};
  const size_t cc = key.rfind('|', version - 1);
  if (cc == absl::string_view::npos || cc == 0) return {};
  const size_t name = key.rfind('|', cc - 1);
  if (name == absl::string_view::npos) return {};
  return key.substr(name + 1, version - name - 1);
}

absl::string_view VersionOfKey(absl::string_view key) {
  return key.substr(key.rfind('|') + 1);
}

}  // namespace coalesce
