#include "kernels/selection/heuristic.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/quote.h"

namespace coalesce {

std::vector<const KernelVariant*> EligibleVariants(
    const VariantRegistry& registry, const Problem& p, const DeviceInfo& dev) {
  std::vector<const KernelVariant*> out;
  for (const KernelVariant* v : registry.ForOp(OpOf(p))) {
    if (v->backend() == dev.backend && v->CanImplement(p, dev).ok()) {
      out.push_back(v);
    }
  }
  return out;
}

std::string EligibleVariantNames(const VariantRegistry& registry,
                                 const Problem& p, const DeviceInfo& dev) {
  std::vector<absl::string_view> names;
  for (const KernelVariant* v : EligibleVariants(registry, p, dev)) {
    names.push_back(v->name());
  }
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<Selection> SelectVariant(const VariantRegistry& registry,
                                        const Problem& p, const DeviceInfo& dev,
                                        absl::string_view forced) {
  if (!forced.empty()) {
    const KernelVariant* v = registry.Find(forced);
    if (v == nullptr || v->backend() != dev.backend || v->op() != OpOf(p)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "options.variant: ", Quoted(forced), " is not a ", OpName(OpOf(p)),
          " variant of the ", BackendName(dev.backend),
          " backend; available for this request: ",
          EligibleVariantNames(registry, p, dev)));
    }
    absl::Status why = v->CanImplement(p, dev);
    if (!why.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "options.variant: ", Quoted(forced), " cannot run this request (",
          why.message(), "); available for this request: ",
          EligibleVariantNames(registry, p, dev)));
    }
    return Selection{v, "forced", "named in options.variant"};
  }
  const KernelVariant* best = nullptr;
  double best_t = 0;
  const std::vector<const KernelVariant*> eligible =
      EligibleVariants(registry, p, dev);
  for (const KernelVariant* v : eligible) {
    const double t = v->EstimateSeconds(p, dev);
    if (best == nullptr || t < best_t) {
      best = v;
      best_t = t;
    }
  }
  if (best == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "no ", BackendName(dev.backend), " variant supports ", Describe(p)));
  }
  return Selection{
      best, "heuristic",
      absl::StrFormat("lowest roofline estimate (%.3g us) of %d "
                      "eligible variants",
                      best_t * 1e6, static_cast<int>(eligible.size()))};
}

}  // namespace coalesce
