// What Registry adds to prometheus-cpp: collect hooks that run before every
// collection, one collection at a time, and the text exposition.
#include "server/metrics/registry.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coalesce::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RegistryTest, HooksRefreshGaugesBeforeEveryCollection) {
  Registry registry;
  Gauge& sampled = registry.AddGauge("test_sampled", "Sampled.").Add({});
  int calls = 0;
  registry.AddCollectHook([&] { sampled.Set(++calls); });
  EXPECT_THAT(registry.Serialize(), HasSubstr("\ntest_sampled 1\n"));
  EXPECT_THAT(registry.Serialize(), HasSubstr("\ntest_sampled 2\n"));
}

TEST(RegistryTest, RaiseToFollowsARunningTotalAndNeverFalls) {
  Registry registry;
  Counter& c = registry.AddCounter("test_total", "Total.").Add({});
  RaiseTo(c, 2.5);
  EXPECT_DOUBLE_EQ(c.Value(), 2.5);
  RaiseTo(c, 2.5);
  EXPECT_DOUBLE_EQ(c.Value(), 2.5);
  RaiseTo(c, 1.0);  // a total that fell (a reset elsewhere) is not followed
  EXPECT_DOUBLE_EQ(c.Value(), 2.5);
  RaiseTo(c, 7.0);
  EXPECT_DOUBLE_EQ(c.Value(), 7.0);
}

TEST(RegistryTest, FamiliesWithoutChildrenAreLeftOut) {
  Registry registry;
  registry.AddCounter("test_unused_total", "No children.");
  registry.AddHistogram("test_latency_seconds", "Latency.")
      .Add({{"op", "gemm"}}, Histogram::BucketBoundaries{0.1, 1})
      .Observe(0.5);
  const std::string text = registry.Serialize();
  EXPECT_THAT(text, Not(HasSubstr("test_unused_total")));
  EXPECT_THAT(text,
              HasSubstr("test_latency_seconds_bucket{op=\"gemm\",le=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("# TYPE test_latency_seconds histogram"));
}

// Hooks never run concurrently, so a hook may read and reset state without
// a lock of its own.
TEST(RegistryTest, CollectionsDoNotInterleaveHooks) {
  Registry registry;
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  registry.AddCollectHook([&] {
    if (inside.fetch_add(1) != 0) overlapped = true;
    std::this_thread::yield();
    inside.fetch_sub(1);
  });
  std::vector<std::thread> scrapers;
  for (int t = 0; t < 4; ++t) {
    scrapers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) registry.Collect();
    });
  }
  for (std::thread& t : scrapers) t.join();
  EXPECT_FALSE(overlapped);
}

}  // namespace
}  // namespace coalesce::metrics
