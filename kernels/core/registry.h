// The variant registry: every variant of a backend, registered explicitly
// from one list per backend (RegisterCpuVariants, RegisterCudaVariants), as
// CUTLASS's initialize_all does; self-registering statics vanish from static
// libraries. Filled once at start-up, then read-only and thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "kernels/core/variant.h"

namespace coalesce {

class VariantRegistry {
 public:
  // Takes ownership. Names must be unique (checked: a programmer error).
  void Add(std::unique_ptr<KernelVariant> v);
  const KernelVariant* Find(absl::string_view name) const;
  std::vector<const KernelVariant*> ForOp(OpKind op) const;
  std::vector<const KernelVariant*> All() const;

 private:
  std::vector<std::unique_ptr<KernelVariant>> variants_;
};

}  // namespace coalesce
