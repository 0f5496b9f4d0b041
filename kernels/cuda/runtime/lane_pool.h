// Lanes of the CUDA backend: a lane is a stream, the events of one call
// on it, two pinned staging buffers and the launch gate. The pool
// hands each call a free lane, so that concurrent requests overlap one's
// host-to-device copy, another's kernel and a third's device-to-host copy,
// and it keeps the device's health: an error that poisons the CUDA context
// (a sticky one) makes every later call fail instead of retrying on a
// broken device. Internal to kernels/cuda.
//
// Thread-safety: DeviceHealth and LanePool::OnLane are thread-safe; a Lane
// belongs to the one call that holds it. Init and Shutdown run alone (from
// the backend's start-up and destruction).
#pragma once

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/runtime/device_util.h"
#include "kernels/cuda/runtime/launch_graphs.h"

namespace coalesce::cuda {

// Pinned staging chunk: large enough that a chunk's DMA (about 150 us at
// 55 GB/s for 8 MiB) hides the host memcpy of the next one, small enough
// that four lanes pin only 64 MiB.
inline constexpr size_t kStagingChunkBytes = size_t{8} << 20;

struct Lane {
  cudaStream_t stream = nullptr;
  // Timed: around a call's kernels, behind the gate. The copies are timed
  // on the host (a timed event costs the stream more than an untimed one).
  cudaEvent_t kernel_start = nullptr, kernel_stop = nullptr;
  // Untimed: the end of a call's work, where a host wait needs one.
  cudaEvent_t done = nullptr;
  // kStagingChunkBytes each (staging.h); staging_free[i] is recorded after
  // the copy that last used staging[i].
  void* staging[2] = {nullptr, nullptr};
  cudaEvent_t staging_free[2] = {nullptr, nullptr};
  // Holds the stream at kernel_start until the launches are queued.
  std::unique_ptr<LaunchGate> gate;
  // Calls on stored operands that repeat, replayed as graphs.
  std::unique_ptr<LaunchGraphs> graphs;
};

// OK until an error leaves the CUDA context unusable; then INTERNAL for
// good, naming the error.
class DeviceHealth {
 public:
  absl::Status Status() const {
    absl::MutexLock lock(&mu_);
    return health_;
  }
  // Returns s; marks the device unhealthy when s is an error and the
  // context holds a sticky one.
  absl::Status Track(absl::Status s);

 private:
  mutable absl::Mutex mu_;
  absl::Status health_ ABSL_GUARDED_BY(mu_);
};

class LanePool {
 public:
  explicit LanePool(int ordinal) : ordinal_(ordinal) {}
  ~LanePool() { Shutdown(); }
  LanePool(const LanePool&) = delete;
  LanePool& operator=(const LanePool&) = delete;

  // Creates `count` lanes on the current device (which must be ordinal's).
  absl::Status Init(int count);
  // Waits for every lane's stream and releases its staging buffers, events
  // and stream, on the current device; the gates go with the pool. Lanes
  // must be free.
  void Shutdown();

  // Runs f(lane) on a free lane of this device, waiting for one, after the
  // health check; an error f returns is tracked (a sticky one makes the
  // device unhealthy). waited (when set): the seconds spent waiting.
  absl::Status OnLane(absl::FunctionRef<absl::Status(Lane&)> f,
                      double* waited = nullptr);

  DeviceHealth& health() { return health_; }
  const DeviceHealth& health() const { return health_; }
  // The first lane's stream, for start-up work before any call.
  cudaStream_t first_stream() const { return lanes_[0].stream; }
  int64_t pinned_staging_bytes() const {
    return static_cast<int64_t>(lanes_.size()) * 2 * kStagingChunkBytes;
  }

 private:
  Lane* Acquire();
  void Release(Lane* l);

  const int ordinal_;
  DeviceHealth health_;
  std::vector<Lane> lanes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Lane*> free_;
};

}  // namespace coalesce::cuda
