// Glue between .npy arrays and coalesce.v1.Tensor messages, plus the seeded
// random inputs and one-line summaries that the CLI and the benchmarks use.
// Pure functions (RandomArray advances only the generator it is given);
// thread-safe.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "client/npy.h"
#include "coalesce/v1/tensor_ops.pb.h"
#include "proto/dtype.h"

namespace coalesce {

// Moves the array into an inline (raw) tensor.
v1::Tensor ToTensor(NpyArray array);
// Takes an inline tensor's bytes. INVALID_ARGUMENT if it is not inline or
// its byte count does not match its shape and dtype.
absl::StatusOr<NpyArray> FromTensor(v1::Tensor tensor);

// Elements drawn uniformly from [-1, 1] and rounded to dtype. An element
// that rounds to zero is replaced by 0.5, so inputs never hide bugs that
// zeros would mask.
absl::StatusOr<NpyArray> RandomArray(DType dtype,
                                     const std::vector<int64_t>& shape,
                                     std::mt19937_64& rng);

// Sum of all elements in float64.
double Checksum(const NpyArray& array);

// "shape=[2,3] dtype=float32 sum=1.25 first=[0.5, -0.25, ...]".
std::string Summarize(const NpyArray& array, int max_values = 4);

}  // namespace coalesce
