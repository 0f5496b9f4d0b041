// Helpers shared by the data-plane tests (data_plane_test.cc on the CPU
// backend and fakes, gpu_data_plane_test.cc on a GPU): seeded float32
// payloads, the transpose they are checked against, inline float32
// matrices in requests, and outputs kept on the server. Pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "coalesce/v1/tensor_ops.pb.h"

namespace coalesce {

// n float32 values uniform in [-1, 1], as raw little-endian bytes.
inline std::string RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::string out(n * 4, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    std::memcpy(&out[i * 4], &v, 4);
  }
  return out;
}

// The [cols, rows] transpose of the float32 matrix `in` of [rows, cols].
inline std::string TransposeReference(const std::string& in, int64_t rows,
                                      int64_t cols) {
  std::string out(in.size(), '\0');
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(&out[(c * rows + r) * 4], &in[(r * cols + c) * 4], 4);
    }
  }
  return out;
}

// Sets t to the inline float32 matrix [rows, cols] whose bytes are raw.
inline void SetInlineMatrix(v1::Tensor* t, int64_t rows, int64_t cols,
                            const std::string& raw) {
  t->set_dtype(v1::DATA_TYPE_FLOAT32);
  t->add_shape(rows);
  t->add_shape(cols);
  t->set_raw(raw);
}

// Asks for the request's (first) output to stay on the server as a handle.
inline void KeepOutputOnServer(v1::ExecutionOptions* options) {
  options->add_outputs()->set_placement(v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
}

}  // namespace coalesce
