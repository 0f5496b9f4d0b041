// Device-side timing for the CUDA backend: Backend::Benchmark and
// BenchmarkCopy on one stream, and the copy peak measured at start-up.
// Inputs are random and resident, outputs poisoned, and enough buffer sets
// are rotated that the timed runs read from HBM, not from L2. Each timing
// runs its repetitions twice, per launch and back to back, captured as one
// CUDA graph and replayed, so that the times are the GPU's and not the
// host's launch rate. Stateless functions; thread-safe for distinct
// streams (one call per stream at a time).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/core/backend.h"
#include "kernels/core/device_info.h"
#include "kernels/core/problem.h"
#include "kernels/core/variant.h"

namespace coalesce::cuda {

// Times v on p on stream (Backend::Benchmark): device's memory bounds the
// buffer sets to a quarter of it.
absl::StatusOr<BenchmarkResult> BenchmarkVariant(const KernelVariant& v,
                                                 const Problem& p,
                                                 const BenchmarkOptions& opts,
                                                 const DeviceInfo& device,
                                                 cudaStream_t stream);

// Benchmark's protocol for a device-to-device copy of bytes > 0
// (Backend::BenchmarkCopy): each of the copy kernels timed on its own, the
// faster back to back reported (as the start-up peak takes the better of
// them).
absl::StatusOr<BenchmarkResult> BenchmarkDeviceCopy(
    int64_t bytes, const BenchmarkOptions& opts, const DeviceInfo& device,
    cudaStream_t stream);

// The copy peak every figure is divided by
// (DeviceInfo::measured_copy_bandwidth), measured on stream at start-up.
absl::StatusOr<double> MeasureCopyPeak(const DeviceInfo& device,
                                       cudaStream_t stream);

}  // namespace coalesce::cuda
