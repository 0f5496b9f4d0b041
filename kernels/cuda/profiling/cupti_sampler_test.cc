// The launch picker and the sampling interval: which launches
// --profile_sampling brackets. Pure host code; runs without a GPU.
#include "kernels/cuda/profiling/cupti_sampler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace coalesce::cuda {
namespace {

TEST(SampleIntervalTest, RoundsTheReciprocal) {
  EXPECT_EQ(SampleInterval(1.0), 1);
  EXPECT_EQ(SampleInterval(0.5), 2);
  EXPECT_EQ(SampleInterval(0.01), 100);  // the flag's default
  EXPECT_EQ(SampleInterval(0.3), 3);     // 3.33
  EXPECT_EQ(SampleInterval(0.4), 3);     // 2.5 rounds away from zero
  EXPECT_EQ(SampleInterval(0.0015), 667);
  EXPECT_EQ(SampleInterval(1e-6), 1000000);
}

TEST(SampleIntervalTest, StaysDefinedOutsideItsDomain) {
  EXPECT_EQ(SampleInterval(2.0), 1);
  EXPECT_EQ(SampleInterval(1e-300), kMaxSampleInterval);
  EXPECT_EQ(SampleInterval(0.0), kMaxSampleInterval);
  EXPECT_EQ(SampleInterval(-1.0), kMaxSampleInterval);
  EXPECT_EQ(SampleInterval(std::nan("")), kMaxSampleInterval);
}

TEST(LaunchPickerTest, PicksNothingUntilGivenAnInterval) {
  LaunchPicker picker;
  EXPECT_EQ(picker.interval(), 0);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(picker.Pick());
}

TEST(LaunchPickerTest, PicksEveryLaunchAtIntervalOne) {
  LaunchPicker picker;
  picker.SetInterval(1);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(picker.Pick());
}

TEST(LaunchPickerTest, PicksTheNthAnd2NthAndSoOn) {
  LaunchPicker picker;
  picker.SetInterval(3);
  std::vector<int> picked;
  for (int call = 1; call <= 10; ++call) {
    if (picker.Pick()) picked.push_back(call);
  }
  // Not the first: a process's first launch of a kernel loads its module
  // and is kept out of the kernel metrics anyway.
  EXPECT_EQ(picked, (std::vector<int>{3, 6, 9}));
}

TEST(LaunchPickerTest, ZeroTurnsPickingOff) {
  LaunchPicker picker;
  picker.SetInterval(1);
  EXPECT_TRUE(picker.Pick());
  picker.SetInterval(0);
  EXPECT_FALSE(picker.Pick());
}

TEST(LaunchPickerTest, CountsAcrossThreadsExactly) {
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 10000;
  constexpr int kInterval = 7;
  LaunchPicker picker;
  picker.SetInterval(kInterval);
  std::atomic<int> picked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        if (picker.Pick()) picked.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(picked.load(), kThreads * kCallsPerThread / kInterval);
}

TEST(RangeCountersTest, BandwidthIsBytesOverDeviceTime) {
  RangeCounters c;
  EXPECT_EQ(c.DramBytesPerSecond(), 0);  // no time read: no rate
  c.dram_bytes = 3e9;
  c.gpu_seconds = 1e-3;
  EXPECT_DOUBLE_EQ(c.DramBytesPerSecond(), 3e12);
}

}  // namespace
}  // namespace coalesce::cuda
