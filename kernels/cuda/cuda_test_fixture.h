// The fixture of the GPU test suites: one CUDA backend on device 0 for the
// whole suite (made once: it measures the copy peak at start-up); every test
// skips, saying why, where no backend can be made (no GPU here).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "kernels/core/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace coalesce {

class CudaBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Graph replays on, so that the suites cover them too.
    absl::StatusOr<std::unique_ptr<Backend>> b =
        CreateCudaBackend(0, /*lanes=*/0, /*launch_graphs=*/true);
    if (b.ok()) {
      backend_ = std::move(*b).release();
    } else {
      skip_reason_ = new std::string(b.status().ToString());
    }
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }
  void SetUp() override {
    if (backend_ == nullptr) GTEST_SKIP() << "no GPU: " << *skip_reason_;
  }
  static inline Backend* backend_ = nullptr;
  static inline std::string* skip_reason_ = nullptr;
};

}  // namespace coalesce
