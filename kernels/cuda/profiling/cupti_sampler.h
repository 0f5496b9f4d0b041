// Device-sampled counters of a request's kernels, read in-process with the
// CUPTI range profiler (the counters Nsight Compute reads): achieved
// occupancy, DRAM bytes and GPU time of every kernel launched inside a
// sampled range. The CUDA backend brackets the variant's Run of every Nth
// Execute with one (Backend::EnableProfileSampling).
//
// Mode: auto range with kernel replay, checked in-process on the H200 by
// profile_sampling_gpu_test (`scripts/gpu-check.sh OUT tests`): each kernel
// launched while a range is open is its own profiler range, CUPTI serializes
// the context's kernels meanwhile and replays a kernel itself should the
// metrics need more than one pass. The profiler is enabled on the context once,
// by Create, and profiles only inside a range; a sampled range then costs its
// request about 20 ms on the H200 (3 ms of set-up, the rest the profiled
// launch; the test prints it), against 245 ms when enabling and disabling it
// around every range. A process that samples cannot also be profiled by Nsight
// Compute.
//
// CUPTI is loaded with dlopen on first use, like cuBLASLt
// (gemm/cublaslt_api.h): a machine or image without it (NVIDIA's CUDA base
// images have none) still serves, and Create says why it cannot sample. Built
// without the CUPTI headers, Create answers UNIMPLEMENTED.
//
// Thread-safety: LaunchPicker is lock-free. CuptiSampler is thread-safe;
// profiling is per context, so it opens one range at a time and TrySample
// answers "busy" to a caller that finds one open. Kernels of other work
// must not launch inside a range: every unsampled launch of the context
// holds launch_lock() shared, and a range holds it exclusively.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace coalesce::cuda {

// The sampling interval N for a fraction of launches: round(1 / fraction),
// at least 1 (for fraction >= 1) and at most kMaxSampleInterval. fraction
// must be > 0.
inline constexpr int64_t kMaxSampleInterval = int64_t{1} << 62;
int64_t SampleInterval(double fraction);

// Picks the Nth, 2Nth, 3Nth, ... call of Pick, counted across threads:
// deterministic for a given sequence of calls. Interval 0 picks nothing.
class LaunchPicker {
 public:
  void SetInterval(int64_t interval) {
    interval_.store(interval, std::memory_order_relaxed);
  }
  int64_t interval() const { return interval_.load(std::memory_order_relaxed); }
  bool Pick() {
    const int64_t n = interval_.load(std::memory_order_relaxed);
    if (n <= 0) return false;
    const uint64_t call = calls_.fetch_add(1, std::memory_order_relaxed) + 1;
    return call % static_cast<uint64_t>(n) == 0;
  }

 private:
  std::atomic<int64_t> interval_{0};
  std::atomic<uint64_t> calls_{0};
};

// What the kernels of one sampled range read.
struct RangeCounters {
  int kernels = 0;         // profiler ranges: one per kernel launched
  double gpu_seconds = 0;  // sum of gpu__time_duration.sum
  double dram_bytes = 0;   // sum of dram__bytes.sum (read + write)
  // 0..1: sm__warps_active.avg.pct_of_peak_sustained_active / 100, each
  // kernel's weighted by its GPU time.
  double achieved_occupancy = 0;
  double DramBytesPerSecond() const {
    return gpu_seconds > 0 ? dram_bytes / gpu_seconds : 0;
  }
};

// Per range: the three metrics above, one profiler pass on the H200.
inline constexpr const char* kSampledMetrics[] = {
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "dram__bytes.sum",
    "gpu__time_duration.sum",
};

class CuptiSampler {
 public:
  // What TrySample did.
  struct Outcome {
    // Another range was open: launch was not called (run it unsampled).
    bool busy = false;
    // launch was called inside the range; launch_status is its result, or
    // the error its kernels raised on the stream.
    bool launched = false;
    absl::Status launch_status;
    // The counters, or why there are none: a profiler error (before the
    // launch, launch was not called: run it unsampled) or a range that held
    // other kernels than the launch's. Meaningless when busy.
    absl::StatusOr<RangeCounters> counters = absl::UnknownError("not sampled");
  };

  // Loads CUPTI, prepares the metrics for CUDA device `device`, whose
  // primary context becomes current on the calling thread, and enables the
  // profiler on that context; also opens and closes one empty range, so
  // that a missing permission shows here and not on the first sampled
  // request. Errors: UNIMPLEMENTED (built without CUPTI, libcupti not
  // found, device or configuration not supported), PERMISSION_DENIED
  // (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: counters restricted to
  // administrators), UNAVAILABLE (another profiler holds the device's
  // counters: DCGM's profiling metrics, CUPTI_ERROR_HARDWARE_BUSY; Nsight
  // Compute or Systems), other CUPTI or CUDA errors as INTERNAL naming the
  // call.
  static absl::StatusOr<std::unique_ptr<CuptiSampler>> Create(int device);
  ~CuptiSampler();
  CuptiSampler(const CuptiSampler&) = delete;
  CuptiSampler& operator=(const CuptiSampler&) = delete;

  // Held shared around every unsampled launch while sampling is on.
  absl::Mutex* launch_lock() { return &launch_mu_; }

  // Runs launch inside a range and reads its kernels' counters. launch
  // enqueues kernels on `stream` (a cudaStream_t of this sampler's device,
  // current on the calling thread) and returns how many it launched (0:
  // unknown, as for a library call), which the range must match. Waits for
  // the stream before closing the range.
  Outcome TrySample(void* stream,
                    absl::FunctionRef<absl::StatusOr<int>()> launch);

 private:
  struct State;  // CUPTI's objects, opaque without its headers
  CuptiSampler() = default;

  // Runs launch (if any) in one range of the enabled profiler and decodes
  // the range's counters into counter_data_.
  absl::Status Profile(void* stream,
                       absl::FunctionRef<absl::StatusOr<int>()>* launch,
                       Outcome* outcome, int* expected_kernels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(range_mu_);
  absl::StatusOr<RangeCounters> Evaluate(int expected_kernels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(range_mu_);

  std::unique_ptr<State> state_;
  absl::Mutex launch_mu_;
  absl::Mutex range_mu_;
  std::vector<uint8_t> counter_data_ ABSL_GUARDED_BY(range_mu_);
};

}  // namespace coalesce::cuda
