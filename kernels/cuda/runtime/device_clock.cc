#include "kernels/cuda/runtime/device_clock.h"

#include <utility>

#include "kernels/cuda/runtime/cuda_check.h"

namespace coalesce::cuda {

ClockAnchor::~ClockAnchor() { cudaEventDestroy(event); }

absl::Status DeviceClock::Init() {
  COALESCE_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cudaEvent_t first = nullptr;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&first));
  auto anchor = std::make_shared<const ClockAnchor>(first, 0.0);
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(first, stream_));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(first));
  absl::MutexLock lock(&mu_);
  current_ = std::move(anchor);
  renewed_ = HostClock::now();
  return absl::OkStatus();
}

void DeviceClock::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    current_.reset();
  }
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
}

std::shared_ptr<const ClockAnchor> DeviceClock::Current() {
  std::shared_ptr<const ClockAnchor> previous;
  {
    absl::MutexLock lock(&mu_);
    if (current_ == nullptr || renewing_ ||
        HostClock::now() - renewed_ < kMaxAnchorAge) {
      return current_;
    }
    renewing_ = true;
    previous = current_;
  }
  // One caller renews, outside the lock; the others keep the old anchor.
  absl::StatusOr<std::shared_ptr<const ClockAnchor>> fresh = Renew(*previous);
  absl::MutexLock lock(&mu_);
  renewing_ = false;
  renewed_ = HostClock::now();
  if (fresh.ok()) current_ = *std::move(fresh);
  return current_;
}

absl::StatusOr<std::shared_ptr<const ClockAnchor>> DeviceClock::Renew(
    const ClockAnchor& previous) {
  cudaEvent_t e = nullptr;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  std::shared_ptr<ClockAnchor> anchor = std::make_shared<ClockAnchor>(e, 0.0);
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e, stream_));
  // The stream is idle: the event completes as soon as the device reaches
  // it, microseconds.
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e));
  float ms = 0;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, previous.event, e));
  anchor->seconds = previous.seconds + ms * 1e-3;
  return anchor;
}

absl::StatusOr<ClockSpan> DeviceClock::Span(const ClockAnchor& anchor,
                                            cudaEvent_t start,
                                            cudaEvent_t stop) {
  float begin = 0, end = 0;
  COALESCE_CUDA_RETURN_IF_ERROR(
      cudaEventElapsedTime(&begin, anchor.event, start));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&end, anchor.event, stop));
  return ClockSpan{anchor.seconds + begin * 1e-3, anchor.seconds + end * 1e-3};
}

}  // namespace coalesce::cuda
