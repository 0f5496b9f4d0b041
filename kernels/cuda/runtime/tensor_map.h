// Tensor maps (CUtensorMap) for the Hopper tensor memory accelerator, built
// on the host and passed to kernels as __grid_constant__ parameters (see
// async_copy.cuh for the device side). The driver's encoder is reached
// through the runtime (cudaGetDriverEntryPointByVersion): nothing links
// against libcuda. Internal to kernels/cuda; thread-safe.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums only: no -lcuda

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace coalesce::cuda {

// A tiled map of rank dims.size() (1 to 5) over `base`: dims innermost
// first (elements), strides[i] the bytes between consecutive indices of
// dims[i + 1] (any order: a map may step through memory non-monotonically),
// boxes of box elements, out-of-range elements of a box read as zero. The
// encoder's rules apply (base and strides multiples of 16 bytes, box
// extents <= 256, the innermost one a multiple of 16 bytes and, swizzled,
// at most the swizzle span); a violation comes back as INTERNAL naming
// `who` and the shape.
absl::Status EncodeTensorMap(CUtensorMap* map, CUtensorMapDataType type,
                             const void* base, absl::Span<const int64_t> dims,
                             absl::Span<const int64_t> strides,
                             absl::Span<const int> box,
                             CUtensorMapSwizzle swizzle, absl::string_view who);

}  // namespace coalesce::cuda
