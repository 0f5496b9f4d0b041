#include "kernels/cuda/runtime/block_cache.h"

#include <algorithm>

namespace coalesce::cuda {

size_t BlockCache::BlockBytes(int64_t bytes) {
  const size_t b = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  return (b + kGranule - 1) / kGranule * kGranule;
}

void* BlockCache::Take(int64_t bytes) {
  const size_t size = BlockBytes(bytes);
  absl::MutexLock lock(&mu_);
  auto it = free_.find(size);
  if (it == free_.end()) return nullptr;
  void* block = it->second.back();
  it->second.pop_back();
  if (it->second.empty()) free_.erase(it);
  cached_bytes_ -= size;
  return block;
}

bool BlockCache::Put(int64_t bytes, void* block) {
  const size_t size = BlockBytes(bytes);
  if (block == nullptr || size > max_block_bytes_) return false;
  absl::MutexLock lock(&mu_);
  if (closed_ || size > max_bytes_ - std::min(max_bytes_, cached_bytes_)) {
    return false;
  }
  free_[size].push_back(block);
  cached_bytes_ += size;
  return true;
}

std::vector<void*> BlockCache::TakeAll(bool close) {
  std::vector<void*> blocks;
  absl::MutexLock lock(&mu_);
  for (auto& [size, list] : free_) {
    blocks.insert(blocks.end(), list.begin(), list.end());
  }
  free_.clear();
  cached_bytes_ = 0;
  closed_ = closed_ || close;
  return blocks;
}

size_t BlockCache::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_bytes_;
}

}  // namespace coalesce::cuda
