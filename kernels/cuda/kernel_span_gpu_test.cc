// RunResult's kernel span on the CUDA backend: every event-timed run has
// one, as long as its kernel time, and runs on one or many threads read
// one clock, also across the anchor's renewals (DeviceClock), so that the
// server's union of spans is the device's busy time. Skips, with the
// reason, where no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/core/backend.h"
#include "kernels/cuda/cuda_test_fixture.h"
#include "kernels/cuda/runtime/device_clock.h"

namespace coalesce {
namespace {

class KernelSpan : public CudaBackendTest {
 protected:
  // A float32 transpose, host operands, random input; Run poisons the
  // output before each run.
  struct Call {
    Call(int64_t rows, int64_t cols, uint32_t seed)
        : problem(TransposeProblem{DType::kFloat32, 1, rows, cols}),
          cols(cols),
          in(rows * cols),
          out(rows * cols) {
      std::mt19937 rng(seed);
      std::uniform_real_distribution<float> u(-1, 1);
      for (float& x : in) x = u(rng);
      ops.inputs.push_back(in.data());
      ops.outputs.push_back(out.data());
    }
    Problem problem;
    int64_t cols;
    std::vector<float> in, out;
    Operands ops;
  };

  const KernelVariant* Variant(const Problem& p) {
    for (const KernelVariant* v : backend_->registry().ForOp(OpOf(p))) {
      if (v->CanImplement(p, backend_->device()).ok()) return v;
    }
    return nullptr;
  }

  RunResult Run(Call& c) {
    const KernelVariant* v = Variant(c.problem);
    RunResult r;
    EXPECT_NE(v, nullptr);
    if (v == nullptr) return r;
    std::memset(c.out.data(), 0xff, c.out.size() * sizeof(float));
    const absl::Status s = backend_->Execute(*v, c.problem, c.ops, &r);
    EXPECT_TRUE(s.ok()) << s;
    // out[0][1] of the transpose is in[1][0].
    EXPECT_EQ(c.out[1], c.in[c.cols]);
    return r;
  }
};

// The events' resolution is about 0.5 us.
constexpr double kResolution = 1e-6;

TEST_F(KernelSpan, EachRunHasItsKernelTimeOnTheClock) {
  Call c(512, 256, 1);
  double last_end = 0;
  for (int i = 0; i < 20; ++i) {
    const RunResult r = Run(c);
    ASSERT_GT(r.kernel_end, r.kernel_begin) << "run " << i;
    EXPECT_NEAR(r.kernel_end - r.kernel_begin, r.kernel_seconds, kResolution)
        << "run " << i;
    // One after another on one thread: each begins after the last ended.
    EXPECT_GE(r.kernel_begin, last_end - kResolution) << "run " << i;
    last_end = r.kernel_end;
  }
}

// Runs further apart than the anchor's age read different anchors; the
// clock between them must keep the host's pace.
TEST_F(KernelSpan, TheClockKeepsTimeAcrossAnchors) {
  Call c(256, 256, 2);
  using Host = std::chrono::steady_clock;
  std::vector<double> host, device;
  for (int i = 0; i < 4; ++i) {
    const Host::time_point before = Host::now();
    const RunResult r = Run(c);
    ASSERT_GT(r.kernel_end, r.kernel_begin) << "run " << i;
    host.push_back(
        std::chrono::duration<double>(before.time_since_epoch()).count());
    device.push_back(r.kernel_begin);
    std::this_thread::sleep_for(cuda::DeviceClock::kMaxAnchorAge * 1.5);
  }
  for (size_t i = 1; i < host.size(); ++i) {
    const double host_gap = host[i] - host[i - 1];
    EXPECT_GT(host_gap, 0.3);
    // Launch latency differs from call to call by far less than 2 ms.
    EXPECT_NEAR(device[i] - device[i - 1], host_gap, 2e-3) << "gap " << i;
  }
}

// Concurrent runs on the backend's lanes: every span is read, and the
// union of the spans is no longer than the wall time they took.
TEST_F(KernelSpan, ConcurrentRunsShareTheClock) {
  constexpr int kThreads = 4, kRuns = 50;
  std::vector<std::vector<RunResult>> results(kThreads);
  std::vector<std::thread> threads;
  using Host = std::chrono::steady_clock;
  const Host::time_point start = Host::now();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Call c(1024, 1024, 10 + t);
      for (int i = 0; i < kRuns; ++i) results[t].push_back(Run(c));
    });
  }
  for (std::thread& t : threads) t.join();
  const double wall =
      std::chrono::duration<double>(Host::now() - start).count();
  std::vector<std::pair<double, double>> spans;
  for (const std::vector<RunResult>& rs : results) {
    for (const RunResult& r : rs) {
      ASSERT_GT(r.kernel_end, r.kernel_begin);
      spans.emplace_back(r.kernel_begin, r.kernel_end);
    }
  }
  std::sort(spans.begin(), spans.end());
  double covered = 0, begin = spans[0].first, end = spans[0].second;
  for (const auto& [b, e] : spans) {
    if (b > end) {
      covered += end - begin;
      begin = b;
    }
    end = std::max(end, e);
  }
  covered += end - begin;
  EXPECT_GT(covered, 0);
  EXPECT_LE(covered, wall);
  EXPECT_LE(spans.back().second - spans.front().first, wall);
}

}  // namespace
}  // namespace coalesce
