// Device utilities for the CUDA backend: the copy kernels whose timed
// bandwidth is the "peak" every figure is divided by (and, timed at a
// variant's own size, its same-size ceiling: Backend::BenchmarkCopy), and
// on-device random fills for benchmark inputs, and the launch gate that
// keeps the host's launch time out of a request's kernel time. Thread-safe
// unless a class says otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dtype.h"

namespace coalesce::cuda {

// The copy kernels, shapes of a 16-byte-vector copy: config 0 loops over
// the data with sms * 8 blocks, config 1 launches one thread per vector,
// config 2 is config 0 launched as the transposes are (a programmatic
// dependent launch that starts early: launch.h, grid_dependency.cuh),
// config 3 is config 2 on half of every SM's threads, so that back to back
// the next copy is resident beside it and prefetches all of a small copy
// while it runs; configs 4 to 6 are the fastest of a sweep of copy shapes at
// small sizes (device_util.cu). None is best everywhere, so a copy ceiling
// is the best of them.
constexpr int kCopyConfigs = 7;

// Enqueues a copy of `bytes` from in to out on stream with copy kernel
// `config` (in [0, kCopyConfigs)); in and out 16-byte aligned, any bytes >= 0
// (a tail of fewer than 16 bytes is copied by one thread). Launch errors are
// returned; nothing is synchronized, so it may be captured into a graph.
absl::Status LaunchCopy(int config, const void* in, void* out, int64_t bytes,
                        cudaStream_t stream);

// Kernel-boundary probes (coalesce-kernel-gap, bench/kernel_gap.cc): what
// a kernel boundary costs back to back, apart from any memory traffic. A
// stamped launch runs on copy config 3's grid, StampedBlocks() blocks of 256
// threads (4 per SM), and every block's thread 0 writes kStampsPerBlock
// global-timer readings (ns) to stamps[kStampsPerBlock * block ...]: on entry,
// past the wait for the previous kernel, and on exit once every thread of the
// block has issued its last store.
constexpr int kStampsPerBlock = 3;
absl::StatusOr<int> StampedBlocks();

// Copy config 3, stamped: bytes a positive multiple of 16.
absl::Status LaunchStampedCopy(const void* in, void* out, int64_t bytes,
                               uint64_t* stamps, cudaStream_t stream);

// A kernel that does nothing but stamp: launched as copy config 3 is (an
// early start that waits for the previous kernel) or plainly.
absl::Status LaunchStampedEmpty(bool early_start, uint64_t* stamps,
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

// Holds a stream until the host opens it. Events recorded behind a closed
// gate, with the launches they time, are timestamped only once the host has
// queued them all: without it, a stream that ran dry (a request on device
// handles, or after a small last copy) times the host's launch calls as
// kernel time, tens of microseconds on a server thread. The gate is a
// one-thread kernel polling a flag in pinned host memory; it passes anyway
// after `timeout_ns` (a cold launch loading its module, a host thread that
// stalls), so a stream is never held for long. A stream memory wait
// (cuStreamWaitValue32) has no such timeout: under lazy module loading, the
// CUDA default, the first launch of a kernel behind it loads the module
// inside the launch call, which waits for the device, so the host never
// opens the gate. With eager loading it ran, but its spans read no closer to
// a trace's kernels than the kernel's. One gate per stream; not thread-safe.
class LaunchGate {
 public:
  static constexpr uint64_t kDefaultTimeoutNs = 50'000'000;  // 50 ms
  static absl::StatusOr<std::unique_ptr<LaunchGate>> Create(
      uint64_t timeout_ns = kDefaultTimeoutNs);
  // The stream must have finished its last Close's kernel (synchronized).
  ~LaunchGate();
  LaunchGate(const LaunchGate&) = delete;
  LaunchGate& operator=(const LaunchGate&) = delete;

  // Enqueues the waiting kernel on stream; the work queued after it runs
  // once Open is called (or the timeout passes).
  absl::Status Close(cudaStream_t stream);
  // Lets the last Close's kernel pass; a no-op when it is open already.
  void Open();

 private:
  LaunchGate(uint32_t* host, uint32_t* device, uint64_t timeout_ns)
      : host_(host), device_(device), timeout_ns_(timeout_ns) {}
  uint32_t* host_;    // pinned, mapped: the flag the kernel polls
  uint32_t* device_;  // the same flag, as the kernel addresses it
  uint64_t timeout_ns_;
  uint32_t seq_ = 0;  // the number the last Close waits for
  bool closed_ = false;
};

// What a pair of events around launches queued behind a closed gate (as a
// request's are) adds to their span, in seconds: the median span of one
// empty kernel between them, of 16, so that an empty launch counts as no
// kernel time. Under the gate the opening event fires 2.5-3 us before the
// kernel starts (the gate's end to the kernel's start, in a trace), which a
// run of back-to-back kernels hides, so no run's share comes off. Uses
// gate, stream and the two events; the stream must be idle.
absl::StatusOr<double> MeasureEventOverhead(LaunchGate& gate,
                                            cudaStream_t stream,
                                            cudaEvent_t start,
                                            cudaEvent_t stop);

// What enqueue queues on stream, captured in the given mode and
// instantiated (nothing runs); the caller destroys the executable. An error
// of enqueue ends the capture and is returned.
absl::StatusOr<cudaGraphExec_t> CaptureGraph(
    cudaStream_t stream, cudaStreamCaptureMode mode,
    absl::FunctionRef<absl::Status()> enqueue);

// The same for launches replayed as a graph between the two events as its
// nodes (LaunchGraphs): the median span of one empty kernel's graph, of 16.
// Uses stream and the two events; the stream must be idle.
absl::StatusOr<double> MeasureGraphEventOverhead(cudaStream_t stream,
                                                 cudaEvent_t start,
                                                 cudaEvent_t stop);

}  // namespace coalesce::cuda
