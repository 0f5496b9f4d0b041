// The device-level activity gauges: read on the poller's thread, the last
// good reading served on each scrape with the device labels and
// source="nvml_gpm", nothing before the first, and a prompt Stop.
#include "server/metrics/device_activity_metrics.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coalesce::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Answers what the test sets, counting reads.
class ScriptedReader final : public DeviceActivityReader {
 public:
  absl::StatusOr<DeviceActivity> Read() override {
    absl::MutexLock lock(&mu_);
    ++reads_;
    return answer_;
  }
  void Set(absl::StatusOr<DeviceActivity> answer) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
  }
  int reads() {
    absl::MutexLock lock(&mu_);
    return reads_;
  }

 private:
  absl::Mutex mu_;
  absl::StatusOr<DeviceActivity> answer_ = absl::UnavailableError("unset");
  int reads_ = 0;
};

DeviceActivity Activity(double occupancy, double dram) {
  DeviceActivity a;
  a.sm_occupancy = occupancy;
  a.dram_bytes_per_second = dram;
  a.interval_seconds = 1;
  return a;
}

DeviceInfo Gpu(int ordinal = 0,
               std::string uuid = "GPU-0e2a4c6d-1111-2222-3333-444455556666") {
  DeviceInfo d;
  d.backend = BackendKind::kCuda;
  d.name = "NVIDIA H200";
  d.ordinal = ordinal;
  d.uuid = std::move(uuid);
  return d;
}

// Waits (up to 5 s) until pred holds.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

constexpr char kLabels[] =
    "{device=\"NVIDIA H200\",gpu=\"0\","
    "gpu_uuid=\"GPU-0e2a4c6d-1111-2222-3333-444455556666\","
    "source=\"nvml_gpm\"}";

TEST(DeviceActivityMetricsTest, ServesTheLastGoodReading) {
  auto reader = std::make_unique<ScriptedReader>();
  ScriptedReader* script = reader.get();
  auto poller = std::make_shared<DeviceActivityPoller>(std::move(reader),
                                                       absl::Milliseconds(5));
  Registry registry;
  AddDeviceActivityMetrics(&registry, {{Gpu(), poller}});

  // Before the first good reading: no series.
  std::string text = registry.Serialize();
  EXPECT_THAT(text, Not(HasSubstr("coalesce_device_sm_occupancy_ratio{")));
  EXPECT_THAT(text, Not(HasSubstr("coalesce_device_dram_bytes_per_second{")));

  script->Set(Activity(0.625, 3.5e12));
  ASSERT_TRUE(Eventually([&] { return poller->Latest().has_value(); }));
  text = registry.Serialize();
  EXPECT_THAT(text,
              HasSubstr(std::string("coalesce_device_sm_occupancy_ratio") +
                        kLabels + " 0.625\n"));
  EXPECT_THAT(text,
              HasSubstr(std::string("coalesce_device_dram_bytes_per_second") +
                        kLabels + " 3500000000000\n"));

  // Failed reads (too soon, NVML errors) keep the last good one.
  script->Set(absl::FailedPreconditionError("GPM samples 5 ms apart"));
  const int reads = script->reads();
  ASSERT_TRUE(Eventually([&] { return poller->failed_reads() > 0; }));
  EXPECT_GT(script->reads(), reads);
  EXPECT_THAT(registry.Serialize(),
              HasSubstr(std::string("coalesce_device_sm_occupancy_ratio") +
                        kLabels + " 0.625\n"));

  script->Set(Activity(0.25, 1e12));
  ASSERT_TRUE(Eventually([&] {
    const std::optional<DeviceActivity> a = poller->Latest();
    return a.has_value() && a->sm_occupancy == 0.25;
  }));
  EXPECT_THAT(registry.Serialize(),
              HasSubstr(std::string("coalesce_device_sm_occupancy_ratio") +
                        kLabels + " 0.25\n"));
}

// Each device has its own series, from its own poller, added with that
// device's first reading.
TEST(DeviceActivityMetricsTest, EachDeviceServesItsOwnReadings) {
  auto first = std::make_unique<ScriptedReader>();
  auto second = std::make_unique<ScriptedReader>();
  ScriptedReader* script0 = first.get();
  ScriptedReader* script1 = second.get();
  auto poller0 = std::make_shared<DeviceActivityPoller>(std::move(first),
                                                        absl::Milliseconds(5));
  auto poller1 = std::make_shared<DeviceActivityPoller>(std::move(second),
                                                        absl::Milliseconds(5));
  Registry registry;
  AddDeviceActivityMetrics(
      &registry,
      {{Gpu(0), poller0},
       {Gpu(1, "GPU-11111111-2222-3333-4444-555555555555"), poller1}});
  const std::string labels1 =
      "{device=\"NVIDIA H200\",gpu=\"1\","
      "gpu_uuid=\"GPU-11111111-2222-3333-4444-555555555555\","
      "source=\"nvml_gpm\"}";

  script0->Set(Activity(0.75, 2e12));
  ASSERT_TRUE(Eventually([&] { return poller0->Latest().has_value(); }));
  std::string text = registry.Serialize();
  EXPECT_THAT(text,
              HasSubstr(std::string("coalesce_device_sm_occupancy_ratio") +
                        kLabels + " 0.75\n"));
  EXPECT_THAT(text, Not(HasSubstr("gpu=\"1\"")));

  script1->Set(Activity(0.125, 4e12));
  ASSERT_TRUE(Eventually([&] { return poller1->Latest().has_value(); }));
  text = registry.Serialize();
  EXPECT_THAT(text, HasSubstr("coalesce_device_sm_occupancy_ratio" + labels1 +
                              " 0.125\n"));
  EXPECT_THAT(text, HasSubstr("coalesce_device_dram_bytes_per_second" +
                              labels1 + " 4000000000000\n"));
  EXPECT_THAT(text,
              HasSubstr(std::string("coalesce_device_dram_bytes_per_second") +
                        kLabels + " 2000000000000\n"));
}

TEST(DeviceActivityPollerTest, StopIsPromptAndFinal) {
  auto reader = std::make_unique<ScriptedReader>();
  ScriptedReader* script = reader.get();
  script->Set(Activity(0.5, 1e12));
  DeviceActivityPoller poller(std::move(reader), absl::Hours(1));
  const auto start = std::chrono::steady_clock::now();
  poller.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(script->reads(), 0);  // the first read was an hour away
  EXPECT_FALSE(poller.Latest().has_value());
  poller.Stop();  // again: nothing
}

TEST(DeviceActivityPollerTest, ReadsOnItsOwnThreadEveryPeriod) {
  auto reader = std::make_unique<ScriptedReader>();
  ScriptedReader* script = reader.get();
  script->Set(Activity(0.5, 1e12));
  DeviceActivityPoller poller(std::move(reader), absl::Milliseconds(2));
  EXPECT_TRUE(Eventually([&] { return script->reads() >= 3; }));
  poller.Stop();
  const int reads = script->reads();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(script->reads(), reads);
  ASSERT_TRUE(poller.Latest().has_value());
  EXPECT_EQ(poller.Latest()->sm_occupancy, 0.5);
}

}  // namespace
}  // namespace coalesce::metrics
