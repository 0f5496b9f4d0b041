#include "base/lru_cache.h"

#include <memory>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace coalesce {
namespace {

TEST(LruCache, DropsTheLeastRecentlyUsedWhenFull) {
  LruCache<int, std::string> cache(2);
  cache.Put(1, std::make_shared<std::string>("one"));
  cache.Put(2, std::make_shared<std::string>("two"));
  ASSERT_NE(cache.Find(1), nullptr);  // 2 is now the least recently used
  cache.Put(3, std::make_shared<std::string>("three"));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.evictions(), 1u);
  EXPECT_EQ(cache.Find(2), nullptr);
  ASSERT_NE(cache.Find(1), nullptr);
  EXPECT_EQ(*cache.Find(1), "one");
  EXPECT_EQ(*cache.Find(3), "three");
}

TEST(LruCache, PutOfAKnownKeyReplacesWithoutDropping) {
  LruCache<int, int> cache(2);
  cache.Put(1, std::make_shared<int>(10));
  cache.Put(2, std::make_shared<int>(20));
  cache.Put(1, std::make_shared<int>(11));  // 2 is now the least recent
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.evictions(), 0u);
  cache.Put(3, std::make_shared<int>(30));
  EXPECT_EQ(cache.Find(2), nullptr);
  EXPECT_EQ(*cache.Find(1), 11);
}

TEST(LruCache, ADroppedEntryLivesWhileACallerHoldsIt) {
  LruCache<int, std::string> cache(1);
  cache.Put(1, std::make_shared<std::string>("held"));
  std::shared_ptr<std::string> held = cache.Find(1);
  std::weak_ptr<std::string> watch = held;
  cache.Put(2, std::make_shared<std::string>("new"));
  EXPECT_EQ(cache.Find(1), nullptr);
  ASSERT_FALSE(watch.expired());
  EXPECT_EQ(*held, "held");
  held.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(LruCache, ManyDistinctKeysStayWithinTheCapacity) {
  LruCache<uint64_t, uint64_t> cache(64);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t key = rng();
    cache.Put(key, std::make_shared<uint64_t>(key ^ 0x5a5a));
    ASSERT_LE(cache.size(), 64u);
    ASSERT_EQ(*cache.Find(key), key ^ 0x5a5a);
  }
  EXPECT_EQ(cache.size(), 64u);
  EXPECT_EQ(cache.evictions(), 10000u - 64u);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(LruCache, CapacityBelowOneMeansOne) {
  LruCache<int, int> cache(0);
  EXPECT_EQ(cache.capacity(), 1u);
  cache.Put(1, std::make_shared<int>(1));
  cache.Put(2, std::make_shared<int>(2));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Find(1), nullptr);
}

}  // namespace
}  // namespace coalesce
