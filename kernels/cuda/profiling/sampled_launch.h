// A call's launches on its lane, with device-sampled counters on the
// launches Backend::EnableProfileSampling picks: the picked launch runs
// inside a CUPTI range (CuptiSampler), every other one outside all ranges.
// Unsampled launches queue behind the lane's closed launch gate, so that
// the lane's kernel_start and kernel_stop events time the kernels and not
// the host's launch calls. Thread-safe: Enable, Run and Unsampled may be
// called from any thread, each Run on a lane its caller holds.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/core/problem.h"
#include "kernels/core/variant.h"
#include "kernels/cuda/profiling/cupti_sampler.h"
#include "kernels/cuda/runtime/lane_pool.h"

namespace coalesce::cuda {

class SampledLaunches {
 public:
  // Backend::EnableProfileSampling: INVALID_ARGUMENT unless
  // 0 < fraction <= 1; creates the sampler on CUDA device `device` on first
  // use (after health's check; CuptiSampler::Create's errors), then samples
  // every Nth Run and returns N.
  absl::StatusOr<int64_t> Enable(double fraction, int device,
                                 const DeviceHealth& health);
  // Backend::DisableProfileSampling: releases the sampler; every later Run
  // is unsampled. Not while a Run is in progress.
  void Disable();
  // Whether launches may be sampled now (Enable called, Disable not since).
  bool enabled() const {
    return sampler_.load(std::memory_order_acquire) != nullptr;
  }

  // Runs v on the lane's stream, kernel_start and kernel_stop recorded
  // around the launches. With sampling on, a launch the picker chooses
  // runs inside a sampled range (*counters), and every other one holds the
  // sampler's launch lock shared so that none falls inside a range. A
  // chosen launch runs unsampled when another range is open, or when the
  // profiler fails before it (*sample_error says why, also for a failure
  // after it); only the variant's own errors fail the call.
  absl::Status Run(Lane& l, const KernelVariant& v, const Problem& p,
                   const Operands& dev, ExecContext& ctx,
                   std::optional<RangeCounters>* counters,
                   absl::Status* sample_error);

  // Runs f outside every sampled range, as an unpicked launch runs: for
  // the bench harness, whose kernels a range would take for a request's.
  absl::Status Unsampled(absl::FunctionRef<absl::Status()> f);

 private:
  // The sampler, published through sampler_ once created, and the picker
  // that chooses the launches it brackets.
  absl::Mutex mu_;
  std::unique_ptr<CuptiSampler> owner_ ABSL_GUARDED_BY(mu_);
  std::atomic<CuptiSampler*> sampler_{nullptr};
  LaunchPicker picker_;
};

}  // namespace coalesce::cuda
