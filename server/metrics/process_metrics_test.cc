// process_* figures against what this test process knows of itself.
#include "server/metrics/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <ctime>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coalesce::metrics {
namespace {

using ::testing::HasSubstr;

TEST(ProcessMetricsTest, FiguresMatchTheProcess) {
  const ProcessStats before = ReadProcessStats();
  // Burn some CPU, hold a thread and a descriptor, then read again.
  volatile double x = 0;
  const std::clock_t start = std::clock();
  while (std::clock() - start < CLOCKS_PER_SEC / 5) x = x + 1;
  const int fd = open("/proc/self/stat", O_RDONLY);
  ASSERT_GE(fd, 0);
  bool stop = false;
  std::thread other([&] {
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) usleep(1000);
  });
  const ProcessStats after = ReadProcessStats();
  __atomic_store_n(&stop, true, __ATOMIC_RELEASE);
  other.join();
  close(fd);

  EXPECT_GE(after.cpu_seconds - before.cpu_seconds, 0.1);
  // At least: a sanitizer starts a thread of its own with the first one.
  EXPECT_GE(after.threads, before.threads + 1);
  EXPECT_GE(after.open_fds, before.open_fds + 1);
  EXPECT_GT(after.resident_bytes, 1 << 20);
  EXPECT_GT(after.virtual_bytes, after.resident_bytes);
  EXPECT_GT(after.max_fds, after.open_fds);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(after.start_time_seconds, now + 1);
  EXPECT_GT(after.start_time_seconds, now - 3600);
}

TEST(ProcessMetricsTest, ExportedUnderTheStandardNames) {
  Registry registry;
  AddProcessMetrics(&registry);
  const std::string text = registry.Serialize();
  for (const char* name :
       {"process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
        "process_threads", "process_start_time_seconds"}) {
    EXPECT_THAT(text, HasSubstr(std::string("\n") + name + " ")) << name;
  }
}

}  // namespace
}  // namespace coalesce::metrics
