#include "kernels/core/registry.h"

#include <cstdio>
#include <cstdlib>

namespace coalesce {

void VariantRegistry::Add(std::unique_ptr<KernelVariant> v) {
  if (Find(v->name()) != nullptr) {
    std::fprintf(stderr, "duplicate kernel variant name: %.*s\n",
                 static_cast<int>(v->name().size()), v->name().data());
    std::abort();
  }
  variants_.push_back(std::move(v));
}

const KernelVariant* VariantRegistry::Find(absl::string_view name) const {
  for (const auto& v : variants_) {
    if (v->name() == name) return v.get();
  }
  return nullptr;
}

std::vector<const KernelVariant*> VariantRegistry::ForOp(OpKind op) const {
  std::vector<const KernelVariant*> out;
  for (const auto& v : variants_) {
    if (v->op() == op) out.push_back(v.get());
  }
  return out;
}

std::vector<const KernelVariant*> VariantRegistry::All() const {
  std::vector<const KernelVariant*> out;
  for (const auto& v : variants_) out.push_back(v.get());
  return out;
}

}  // namespace coalesce
