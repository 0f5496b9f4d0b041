#include "kernels/cuda/runtime/resident_memory.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/staging.h"

namespace coalesce::cuda {
namespace {

// Each piece is staged through a lane's pinned buffers like CopyIn, but the
// lane is released without waiting for the last host-to-device copy; an
// event per lane used marks where this writer's copies end on that lane's
// stream, and Finish waits for those. Later users of a lane queue behind
// the copies, and StageIn reuses a staging buffer only after its copy
// (staging_free), so the source bytes stay intact.
class Writer final : public ResidentWriter {
 public:
  Writer(LanePool* lanes, char* base, int64_t size)
      : lanes_(lanes), base_(base), size_(size) {}
  ~Writer() override { Finish().IgnoreError(); }
  absl::Status Write(int64_t offset, const void* src, int64_t bytes) override {
    COALESCE_RETURN_IF_ERROR(
        CheckResidentRange("ResidentWriter::Write", size_, offset, bytes));
    if (bytes == 0) return absl::OkStatus();
    return lanes_->OnLane([&](Lane& l) -> absl::Status {
      absl::Status s =
          StageIn(l, base_ + offset, src, static_cast<size_t>(bytes));
      auto it = std::find_if(done_.begin(), done_.end(),
                             [&](const auto& e) { return e.first == &l; });
      if (it == done_.end()) it = done_.insert(done_.end(), {&l, nullptr});
      cudaEvent_t& done = it->second;
      if (s.ok() && done == nullptr) {
        s = CudaStatus(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                       "cudaEventCreateWithFlags", __FILE__, __LINE__);
      }
      if (s.ok()) {
        s = CudaStatus(cudaEventRecord(done, l.stream), "cudaEventRecord",
                       __FILE__, __LINE__);
      }
      // A failed piece leaves nothing queued for the lane's next user.
      if (!s.ok()) cudaStreamSynchronize(l.stream);
      return s;
    });
  }
  absl::Status Finish() override {
    absl::Status s;
    for (auto& [lane, done] : done_) {
      if (done == nullptr) continue;
      s.Update(CudaStatus(cudaEventSynchronize(done), "cudaEventSynchronize",
                          __FILE__, __LINE__));
      cudaEventDestroy(done);
    }
    done_.clear();
    return s;
  }

 private:
  LanePool* const lanes_;
  char* const base_;
  const int64_t size_;
  // (lane, event) for each lane this writer's copies went through: a few.
  std::vector<std::pair<const Lane*, cudaEvent_t>> done_;
};

}  // namespace

absl::Status ResidentMemory::Init() {
  // Keep freed memory in the pool: requests reuse it without a driver call.
  cudaMemPool_t pool;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, ordinal_));
  uint64_t threshold = UINT64_MAX;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaMemPoolSetAttribute(
      pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  COALESCE_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  return absl::OkStatus();
}

void ResidentMemory::Shutdown() {
  if (stream_) {
    cudaSetDevice(ordinal_);
    ReleaseCached(/*close=*/true);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
}

absl::StatusOr<std::shared_ptr<void>> ResidentMemory::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resident allocation of ", bytes, " bytes"));
  }
  COALESCE_RETURN_IF_ERROR(lanes_->health().Status());
  void* q = cache_->Take(bytes);
  if (q == nullptr) {
    COALESCE_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    absl::Status allocated = AllocateFromPool(bytes, &q);
    if (!allocated.ok() && cudaPeekAtLastError() == cudaErrorMemoryAllocation) {
      // Out of memory, not sticky: the cached blocks go back to the pool
      // and the allocation is tried once more.
      cudaGetLastError();
      ReleaseCached();
      allocated = AllocateFromPool(bytes, &q);
    }
    if (!allocated.ok()) return lanes_->health().Track(allocated);
  }
  const int ordinal = ordinal_;
  cudaStream_t stream = stream_;
  return std::shared_ptr<void>(
      q, [cache = cache_, bytes, ordinal, stream](void* r) {
        // Nothing on the device uses r any more (the class comment): kept
        // for the next allocation of its size, or freed. The last
        // reference may go on any thread, whose current device may be
        // another; a failure here has no caller to report to and is left
        // to the next call's error check (DeviceHealth::Track).
        if (cache->Put(bytes, r)) return;
        cudaSetDevice(ordinal);
        cudaFreeAsync(r, stream);
      });
}

absl::Status ResidentMemory::AllocateFromPool(int64_t bytes, void** q) {
  *q = nullptr;
  absl::Status s =
      CudaStatus(cudaMallocAsync(q, BlockCache::BlockBytes(bytes), stream_),
                 "cudaMallocAsync", __FILE__, __LINE__);
  if (s.ok()) {
    s = CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize",
                   __FILE__, __LINE__);
  }
  if (!s.ok() && *q != nullptr) {
    cudaFreeAsync(*q, stream_);
    *q = nullptr;
  }
  return s;
}

void ResidentMemory::ReleaseCached(bool close) {
  for (void* block : cache_->TakeAll(close)) cudaFreeAsync(block, stream_);
}

absl::Status ResidentMemory::CopyIn(void* dst, const void* src, int64_t bytes) {
  return lanes_->OnLane([&](Lane& l) {
    absl::Status s = StageIn(l, dst, src, static_cast<size_t>(bytes));
    const absl::Status synced =
        CudaStatus(cudaStreamSynchronize(l.stream), "cudaStreamSynchronize",
                   __FILE__, __LINE__);
    return s.ok() ? synced : s;
  });
}

absl::Status ResidentMemory::CopyOut(const void* src, void* dst,
                                     int64_t bytes) {
  return lanes_->OnLane([&](Lane& l) {
    // StageOut waits for its last chunk before it returns, unless it fails
    // before: then nothing may stay queued on the lane for its next user.
    const absl::Status s = StageOut(l, dst, src, static_cast<size_t>(bytes));
    if (!s.ok()) cudaStreamSynchronize(l.stream);
    return s;
  });
}

std::unique_ptr<ResidentWriter> ResidentMemory::OpenWriter(
    void* resident, int64_t resident_bytes) {
  return std::make_unique<Writer>(lanes_, static_cast<char*>(resident),
                                  resident_bytes);
}

MemoryStats ResidentMemory::Stats() const {
  MemoryStats m;
  m.block_cache_bytes = static_cast<int64_t>(cache_->cached_bytes());
  if (cudaSetDevice(ordinal_) != cudaSuccess) {
    cudaGetLastError();
    return m;
  }
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
    m.used_bytes = static_cast<int64_t>(total - free);
    m.total_bytes = static_cast<int64_t>(total);
  } else {
    cudaGetLastError();
  }
  cudaMemPool_t pool;
  uint64_t reserved = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, ordinal_) == cudaSuccess &&
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent,
                              &reserved) == cudaSuccess) {
    m.pool_reserved_bytes = static_cast<int64_t>(reserved);
  } else {
    cudaGetLastError();
  }
  return m;
}

}  // namespace coalesce::cuda
