// Device utilities for the CUDA backend: the copy kernels whose timed
// bandwidth is the "peak" every figure is divided by (and, timed at a
// variant's own size, its same-size ceiling: Backend::BenchmarkCopy), and
// on-device random fills for benchmark inputs. Thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/dtype.h"

namespace coalesce::cuda {

// The copy kernels, two common shapes of a 16-byte-vector copy: config 0
// loops over the data with sms * 8 blocks, config 1 launches one thread per
// vector. Neither is best everywhere, so a copy ceiling is the better of the
// two.
constexpr int kCopyConfigs = 2;

// Enqueues a copy of `bytes` from in to out on stream with copy kernel
// `config` (in [0, kCopyConfigs)); in and out 16-byte aligned, any bytes >= 0
// (a tail of fewer than 16 bytes is copied by one thread). Launch errors are
// returned; nothing is synchronized, so it may be captured into a graph.
absl::Status LaunchCopy(int config, const void* in, void* out, int64_t bytes,
                        cudaStream_t stream);

// Bytes read + written per second of a device-to-device copy of `bytes`,
// timed with events on `stream` after a warm-up that brings the clocks up:
// the better of the copy kernels' medians over reps.
absl::StatusOr<double> MeasureCopyBandwidth(int64_t bytes, int reps,
                                            cudaStream_t stream);

// Fills n elements of type t with values of magnitude in [0.25, 1), random
// sign, a hash of (seed, index): never zeros.
absl::Status FillRandomDevice(void* data, DType t, int64_t n, uint64_t seed,
                              cudaStream_t stream);

}  // namespace coalesce::cuda
