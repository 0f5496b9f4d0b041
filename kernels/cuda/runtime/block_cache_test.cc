#include "kernels/cuda/runtime/block_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace coalesce::cuda {
namespace {

// Stand-ins for device blocks: distinct addresses, never dereferenced.
void* Block(uintptr_t i) { return reinterpret_cast<void*>(4096 * (i + 1)); }

TEST(BlockCacheTest, SizesRoundUpToTheGranule) {
  EXPECT_EQ(BlockCache::BlockBytes(0), 512u);
  EXPECT_EQ(BlockCache::BlockBytes(-5), 512u);
  EXPECT_EQ(BlockCache::BlockBytes(1), 512u);
  EXPECT_EQ(BlockCache::BlockBytes(512), 512u);
  EXPECT_EQ(BlockCache::BlockBytes(513), 1024u);
  EXPECT_EQ(BlockCache::BlockBytes(65536), 65536u);
}

TEST(BlockCacheTest, ATakenBlockHasTheRoundedSizeAndLeavesTheCache) {
  BlockCache cache(1 << 20, 1 << 20);
  EXPECT_EQ(cache.Take(1000), nullptr);
  ASSERT_TRUE(cache.Put(1000, Block(1)));
  EXPECT_EQ(cache.cached_bytes(), 1024u);
  EXPECT_EQ(cache.Take(2000), nullptr);   // another size
  EXPECT_EQ(cache.Take(1024), Block(1));  // same rounded size
  EXPECT_EQ(cache.Take(1000), nullptr);
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

TEST(BlockCacheTest, BoundsRefuseAndTheCallerKeepsTheBlock) {
  BlockCache cache(4096, 2048);
  EXPECT_FALSE(cache.Put(4096, Block(1)));  // larger than a cached block
  EXPECT_FALSE(cache.Put(100, nullptr));
  EXPECT_TRUE(cache.Put(2048, Block(2)));
  EXPECT_TRUE(cache.Put(2048, Block(3)));
  EXPECT_FALSE(cache.Put(512, Block(4)));  // the cache is full
  EXPECT_EQ(cache.cached_bytes(), 4096u);
  // The last one put comes back first.
  EXPECT_EQ(cache.Take(2048), Block(3));
  EXPECT_TRUE(cache.Put(512, Block(4)));
}

TEST(BlockCacheTest, TakeAllEmptiesItAndCloseRefusesLaterPuts) {
  BlockCache cache(1 << 20, 1 << 20);
  ASSERT_TRUE(cache.Put(10, Block(1)));
  ASSERT_TRUE(cache.Put(10, Block(2)));
  ASSERT_TRUE(cache.Put(5000, Block(3)));
  std::vector<void*> all = cache.TakeAll();
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<void*>{Block(1), Block(2), Block(3)}));
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(cache.Take(10), nullptr);
  EXPECT_TRUE(cache.Put(10, Block(1)));
  EXPECT_EQ(cache.TakeAll(/*close=*/true).size(), 1u);
  EXPECT_FALSE(cache.Put(10, Block(1)));
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

// Many threads taking and returning blocks of random sizes: no block is
// ever held by two at once, and none is lost.
TEST(BlockCacheTest, ConcurrentTakeAndPutNeverShareABlock) {
  constexpr int kThreads = 8, kRounds = 2000, kBlocks = 64;
  BlockCache cache(size_t{1} << 30, size_t{1} << 30);
  const int64_t sizes[] = {100, 600, 4096, 65536};
  // Block i has size sizes[i % 4]; all start in the cache.
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE(cache.Put(sizes[i % 4], Block(i)));
  }
  std::vector<std::atomic<int>> holders(kBlocks);
  std::atomic<bool> shared{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int r = 0; r < kRounds; ++r) {
        const int64_t size = sizes[rng() % 4];
        void* b = cache.Take(size);
        if (b == nullptr) continue;
        const int i =
            static_cast<int>(reinterpret_cast<uintptr_t>(b) / 4096 - 1);
        if (sizes[i % 4] != size || holders[i].fetch_add(1) != 0) {
          shared = true;
        }
        holders[i].fetch_sub(1);
        if (!cache.Put(size, b)) shared = true;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_FALSE(shared);
  std::vector<void*> all = cache.TakeAll();
  EXPECT_EQ(std::set<void*>(all.begin(), all.end()).size(),
            static_cast<size_t>(kBlocks));
}

}  // namespace
}  // namespace coalesce::cuda
