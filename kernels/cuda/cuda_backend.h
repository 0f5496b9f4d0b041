// The CUDA backend: one device, a stream-ordered allocator (the device's
// default cudaMallocAsync pool, kept warm), a pool of lanes (a stream, its
// events and two pinned staging buffers each) so concurrent requests overlap
// host-to-device copy, kernel and device-to-host copy, and the copy peak
// measured at start-up. No CUDA header here: the server includes this only
// through kernels/backends.cc. Thread-safe.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/core/backend.h"

namespace coalesce {

// FAILED_PRECONDITION when no CUDA device is visible (the message says why).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device);

// The one list of CUDA variants (kernels/cuda/register.cc).
void RegisterCudaVariants(VariantRegistry& registry);

}  // namespace coalesce
