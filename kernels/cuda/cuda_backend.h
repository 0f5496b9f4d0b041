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

// The default number of lanes: concurrent requests in flight on the device.
// Four let one request's host-to-device copy, another's kernel and a third's
// device-to-host copy overlap without oversubscribing the copy engines.
inline constexpr int kDefaultCudaLanes = 4;

// FAILED_PRECONDITION when no CUDA device is visible (the message says why).
// lanes: streams with their own pinned staging (2 x 8 MiB each); 0 means
// kDefaultCudaLanes. launch_graphs: a call on stored operands that repeats
// on a lane replays a CUDA graph of its launches (RunResult::graph_replayed).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    int device, int lanes = 0, bool launch_graphs = false);

// CUDA devices this process can see; 0 when none (or no driver).
int CudaDeviceCount();

// The one list of CUDA variants (kernels/cuda/register.cc).
void RegisterCudaVariants(VariantRegistry& registry);

}  // namespace coalesce
