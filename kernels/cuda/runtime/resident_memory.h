// Resident memory of the CUDA backend: device memory from the device's
// default stream-ordered pool (kept warm: freed memory stays in the pool,
// so requests reuse it without a driver call), allocated and freed on a
// stream of its own, and the copies between it and host memory, staged
// through the lanes' pinned buffers as a call's host operands are. Also the
// device's memory figures (MemoryStats).
//
// An allocation is synchronized before it is handed out, so the lanes'
// streams may use it without an event; it is released after every use has
// completed (Execute and the copies synchronize before they return, a
// writer's Finish or destructor waits for its copies, and the store drops
// a tensor only after its users are done). Released blocks are kept for
// the next allocation of their size (BlockCache: up to
// kCachedBytes in all), which then makes no CUDA call at all; the rest go
// back to the pool, as the cached ones do when an allocation finds the
// device full, and at Shutdown.
//
// Thread-safety: Allocate, the copies, OpenWriter and Stats are
// thread-safe; a writer is used by one thread at a time. Init and Shutdown
// run alone.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/backend.h"
#include "kernels/cuda/runtime/block_cache.h"
#include "kernels/cuda/runtime/lane_pool.h"

namespace coalesce::cuda {

class ResidentMemory {
 public:
  // lanes: the device's lanes (copies, health); must outlive this.
  ResidentMemory(int ordinal, LanePool* lanes)
      : ordinal_(ordinal), lanes_(lanes) {}
  ~ResidentMemory() { Shutdown(); }
  ResidentMemory(const ResidentMemory&) = delete;
  ResidentMemory& operator=(const ResidentMemory&) = delete;

  // Keeps the pool warm and creates the stream, on the current device
  // (which must be ordinal's).
  absl::Status Init();
  // Waits for the stream and destroys it, on the current device.
  void Shutdown();

  // Backend::AllocateResident.
  absl::StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes);
  // Blocks kept for reuse: at most this much device memory, in blocks of
  // up to kCachedBlockBytes (larger ones pay the pool's call, which their
  // copies dwarf).
  static constexpr size_t kCachedBytes = size_t{256} << 20;
  static constexpr size_t kCachedBlockBytes = size_t{64} << 20;
  size_t cached_bytes() const { return cache_->cached_bytes(); }
  // Host <-> resident, range already checked; synchronized, so that the
  // bytes are in place for whichever lane reads them next.
  absl::Status CopyIn(void* dst, const void* src, int64_t bytes);
  absl::Status CopyOut(const void* src, void* dst, int64_t bytes);
  // PutTensor's writer into [resident, resident + resident_bytes): each
  // piece staged as CopyIn stages it, the lane released without waiting
  // for its copy.
  std::unique_ptr<ResidentWriter> OpenWriter(void* resident,
                                             int64_t resident_bytes);

  // Used, total and pool-reserved bytes (-1 where a query fails); the
  // pinned staging bytes are the lanes' to fill in.
  MemoryStats Stats() const;

 private:
  // From the pool on stream_, synchronized; *q null on failure.
  absl::Status AllocateFromPool(int64_t bytes, void** q);
  // The cached blocks back to the pool (stream-ordered on stream_); with
  // close, blocks released later are freed instead of cached.
  void ReleaseCached(bool close = false);

  const int ordinal_;
  LanePool* const lanes_;
  cudaStream_t stream_ = nullptr;
  // Shared with the allocations' deleters, which may outlive a failed
  // start-up's object.
  const std::shared_ptr<BlockCache> cache_ =
      std::make_shared<BlockCache>(kCachedBytes, kCachedBlockBytes);
};

}  // namespace coalesce::cuda
