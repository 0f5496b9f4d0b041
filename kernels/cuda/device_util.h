// Device utilities for the CUDA backend: the copy kernel whose timed
// bandwidth is the "peak" every figure is divided by, and on-device random
// fills for benchmark inputs. Thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/core/dtype.h"

namespace coalesce::cuda {

// Bytes read + written per second of a 16-byte-vector device-to-device copy
// of `bytes`, timed with events on `stream` after a warm-up that brings the
// clocks up: the better of two copy kernels' medians over reps.
absl::StatusOr<double> MeasureCopyBandwidth(int64_t bytes, int reps,
                                            cudaStream_t stream);

// Fills n elements of type t with values of magnitude in [0.25, 1), random
// sign, a hash of (seed, index): never zeros.
absl::Status FillRandomDevice(void* data, DType t, int64_t n, uint64_t seed,
                              cudaStream_t stream);

}  // namespace coalesce::cuda
