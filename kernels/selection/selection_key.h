// The selection key: what a variant choice depends on, and nothing else, so
// that one tuning result serves every request that would choose alike. The
// shape is reduced per op (log2 buckets of the sizes that set the cost, and
// the alignment classes that decide which variants are eligible), joined
// with the device's name and compute capability and a version of the op's
// variant set. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "kernels/core/device_info.h"
#include "kernels/core/problem.h"
#include "kernels/core/registry.h"

namespace coalesce {

// The op and shape part, e.g. "transpose|float32|b0|r13|c13|a8.8".
std::string ShapeKey(const Problem& p);

// "NVIDIA H200|9.0": a table measured on one device serves any device of
// the same name.
std::string DeviceKey(const DeviceInfo& d);

// A short hash of the names (and revisions, KernelVariant::revision) of
// op's registered variants, in registration order: adding, removing,
// renaming or revising one of them invalidates the tuned choices for that
// op, and only for it (a new transpose variant leaves the GEMM entries of a
// shipped table valid).
std::string VariantSetVersion(const VariantRegistry& r, OpKind op);

// Every op's version, "transpose=v...,gemm=v...,...": what a tuning file
// records of the build that wrote it.
std::string VariantSetVersions(const VariantRegistry& r);

// ShapeKey|DeviceKey|VariantSetVersion of p's op.
std::string SelectionKey(const Problem& p, const DeviceInfo& d,
                         absl::string_view variant_set_version);

// A SelectionKey's op (its first field; nullopt if it names none), its
// DeviceKey (the two fields before the last; empty if the key has fewer
// than four) and its op's variant set version (its last field).
std::optional<OpKind> OpOfKey(absl::string_view key);
absl::string_view DeviceOfKey(absl::string_view key);
absl::string_view VersionOfKey(absl::string_view key);

// ceil(log2(x)) for x >= 1: the bucket of a size.
int Log2Bucket(int64_t x);

}  // namespace coalesce
