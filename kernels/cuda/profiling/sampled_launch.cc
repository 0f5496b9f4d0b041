#include "kernels/cuda/profiling/sampled_launch.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/cuda_check.h"

namespace coalesce::cuda {
namespace {

// v's launches between kernel_start and kernel_stop, all queued behind the
// lane's closed gate before it opens: the events then time the kernels,
// not the host's launch calls (LaunchGate).
absl::Status RunGated(Lane& l, const KernelVariant& v, const Problem& p,
                      const Operands& dev, ExecContext& ctx) {
  COALESCE_RETURN_IF_ERROR(l.gate->Close(l.stream));
  absl::Cleanup open = [&l] { l.gate->Open(); };
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.kernel_start, l.stream));
  COALESCE_RETURN_IF_ERROR(v.Run(p, dev, ctx));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.kernel_stop, l.stream));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> SampledLaunches::Enable(double fraction, int device,
                                                const DeviceHealth& health) {
  if (!(fraction > 0 && fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the sampled fraction of launches must be in (0, 1], not ", fraction));
  }
  absl::MutexLock lock(&mu_);
  if (owner_ == nullptr) {
    COALESCE_RETURN_IF_ERROR(health.Status());
    COALESCE_ASSIGN_OR_RETURN(owner_, CuptiSampler::Create(device));
    sampler_.store(owner_.get(), std::memory_order_release);
  }
  const int64_t interval = SampleInterval(fraction);
  picker_.SetInterval(interval);
  return interval;
}

void SampledLaunches::Disable() {
  absl::MutexLock lock(&mu_);
  sampler_.store(nullptr, std::memory_order_release);
  owner_.reset();
}

absl::Status SampledLaunches::Run(Lane& l, const KernelVariant& v,
                                  const Problem& p, const Operands& dev,
                                  ExecContext& ctx,
                                  std::optional<RangeCounters>* counters,
                                  absl::Status* sample_error) {
  CuptiSampler* sampler = sampler_.load(std::memory_order_acquire);
  if (sampler == nullptr) return RunGated(l, v, p, dev, ctx);
  if (picker_.Pick()) {
    // No gate: the range's own GPU time replaces the events' span.
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.kernel_start, l.stream));
    CuptiSampler::Outcome sampled =
        sampler->TrySample(l.stream, [&]() -> absl::StatusOr<int> {
          COALESCE_RETURN_IF_ERROR(v.Run(p, dev, ctx));
          return ctx.launch.launches;
        });
    if (sampled.launched) {
      COALESCE_RETURN_IF_ERROR(sampled.launch_status);
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.kernel_stop, l.stream));
      if (sampled.counters.ok()) {
        *counters = *sampled.counters;
      } else {
        *sample_error = sampled.counters.status();
      }
      return absl::OkStatus();
    }
    if (!sampled.busy) *sample_error = sampled.counters.status();
  }
  // The gate's kernel too stays out of every range.
  absl::ReaderMutexLock lock(sampler->launch_lock());
  return RunGated(l, v, p, dev, ctx);
}

absl::Status SampledLaunches::Unsampled(absl::FunctionRef<absl::Status()> f) {
  CuptiSampler* sampler = sampler_.load(std::memory_order_acquire);
  std::optional<absl::ReaderMutexLock> outside_ranges;
  if (sampler != nullptr) outside_ranges.emplace(sampler->launch_lock());
  return f();
}

}  // namespace coalesce::cuda
