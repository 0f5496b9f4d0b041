// One clock per device for the kernels' spans, so that spans timed on
// different streams can be compared (the server takes their union as the
// device's busy time). A timed event gives only a difference from another
// one, in float milliseconds; so a span is read against an anchor, a timed
// event recorded on an idle stream of the clock's own, and the anchor is
// renewed every kMaxAnchorAge so that the float keeps sub-microsecond
// steps. Each anchor's offset from the first is the previous anchor's plus
// the time between them, so every anchor reads the same clock. Internal to
// kernels/cuda.
//
// Thread-safety: Current is thread-safe; Init and Shutdown run alone.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace coalesce::cuda {

// A completed timed event and its time on the device's clock, in seconds.
struct ClockAnchor {
  ClockAnchor(cudaEvent_t e, double s) : event(e), seconds(s) {}
  ~ClockAnchor();
  ClockAnchor(const ClockAnchor&) = delete;
  ClockAnchor& operator=(const ClockAnchor&) = delete;
  cudaEvent_t event;
  double seconds;
};

// [begin, end] on a device's clock, in seconds.
struct ClockSpan {
  double begin = 0, end = 0;
};

class DeviceClock {
 public:
  static constexpr std::chrono::milliseconds kMaxAnchorAge{250};

  DeviceClock() = default;
  ~DeviceClock() { Shutdown(); }
  DeviceClock(const DeviceClock&) = delete;
  DeviceClock& operator=(const DeviceClock&) = delete;

  // On the current device: the clock's stream and first anchor.
  absl::Status Init();
  void Shutdown();

  // The anchor to read a call's events against: take it before the call
  // records them, so that they come after it. Renews the anchor (on the
  // current device, which must be the clock's) when it is older than
  // kMaxAnchorAge; if renewing fails, the older one serves.
  std::shared_ptr<const ClockAnchor> Current();

  // [start, stop] on the clock of `anchor`; both events completed, timed,
  // and recorded after the anchor.
  static absl::StatusOr<ClockSpan> Span(const ClockAnchor& anchor,
                                        cudaEvent_t start, cudaEvent_t stop);

 private:
  using HostClock = std::chrono::steady_clock;
  absl::StatusOr<std::shared_ptr<const ClockAnchor>> Renew(
      const ClockAnchor& previous);

  cudaStream_t stream_ = nullptr;
  absl::Mutex mu_;
  std::shared_ptr<const ClockAnchor> current_ ABSL_GUARDED_BY(mu_);
  HostClock::time_point renewed_ ABSL_GUARDED_BY(mu_);
  bool renewing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace coalesce::cuda
