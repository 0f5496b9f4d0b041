// Freed device blocks kept for reuse by size, so that a request that
// creates a tensor of a size seen before gets its memory without a driver
// call or a synchronization (the resident allocator's fast path). It only
// holds pointers: the caller allocates and frees them, and hands a block
// back only once nothing on the device uses it any more. CUDA-free.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace coalesce::cuda {

class BlockCache {
 public:
  // Blocks are cached by their size rounded up to kGranule bytes; at most
  // max_bytes in all, none larger than max_block_bytes.
  static constexpr size_t kGranule = 512;
  BlockCache(size_t max_bytes, size_t max_block_bytes)
      : max_bytes_(max_bytes), max_block_bytes_(max_block_bytes) {}
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // What a request of `bytes` allocates (at least one granule, so that an
  // empty tensor still has a distinct pointer).
  static size_t BlockBytes(int64_t bytes);

  // A cached block of BlockBytes(bytes), removed from the cache; nullptr
  // when none.
  void* Take(int64_t bytes);
  // Keeps `block` (of BlockBytes(bytes)) for a later Take: true. False when
  // it does not fit the bounds or the cache is closed: the caller frees it.
  bool Put(int64_t bytes, void* block);
  // Empties the cache and returns its blocks for the caller to free; with
  // close, later Puts are refused (the allocator is going away).
  std::vector<void*> TakeAll(bool close = false);

  size_t cached_bytes() const;

 private:
  const size_t max_bytes_;
  const size_t max_block_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace coalesce::cuda
