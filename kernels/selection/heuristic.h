// Variant selection: a pure function of the problem, the device description
// and the registry, so it is tested without a GPU. Today: a forced name, or
// the eligible variant with the lowest roofline estimate. Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/core/registry.h"

namespace coalesce {

struct Selection {
  const KernelVariant* variant = nullptr;
  std::string source;  // "forced" or "heuristic"
  std::string reason;
};

// forced empty: automatic. A forced name that does not exist or cannot run
// the problem gives INVALID_ARGUMENT listing the variants that can; no
// eligible variant at all gives UNIMPLEMENTED.
absl::StatusOr<Selection> SelectVariant(const VariantRegistry& registry,
                                        const Problem& p, const DeviceInfo& dev,
                                        absl::string_view forced);

// The variants of dev's backend that can run p, in registration order.
std::vector<const KernelVariant*> EligibleVariants(
    const VariantRegistry& registry, const Problem& p, const DeviceInfo& dev);

// Names of the variants that can run p on dev, comma-separated.
std::string EligibleVariantNames(const VariantRegistry& registry,
                                 const Problem& p, const DeviceInfo& dev);

}  // namespace coalesce
