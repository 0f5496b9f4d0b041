// The device-level activity gauges of --profile_sampling=gpm (and of
// sampled's fallback): a DeviceActivityReader (NVML GPM on the CUDA backend)
// read on a small thread of its own every second, never on the scrape
// thread, and its last good reading exported on each scrape:
//
//   coalesce_device_sm_occupancy_ratio     (0..1)
//   coalesce_device_dram_bytes_per_second  (bytes/s)
//
// labelled by metrics::DeviceLabels plus source="nvml_gpm". A scrape sooner
// than the next reading (or a failed reading) serves the last pair's
// result; the series appear with the first good reading.
//
// Thread-safety: DeviceActivityPoller is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/core/device_activity.h"
#include "kernels/core/device_info.h"
#include "server/metrics/registry.h"

namespace coalesce::metrics {

// How often the poller reads: GPM needs 100 ms between its two samples;
// a second keeps the reads cheap and the interval close to a scrape's.
inline constexpr absl::Duration kDeviceActivityPeriod = absl::Seconds(1);

class DeviceActivityPoller {
 public:
  // Starts the thread; its first Read comes one period from now.
  explicit DeviceActivityPoller(std::unique_ptr<DeviceActivityReader> reader,
                                absl::Duration period = kDeviceActivityPeriod);
  ~DeviceActivityPoller();  // Stop()
  DeviceActivityPoller(const DeviceActivityPoller&) = delete;
  DeviceActivityPoller& operator=(const DeviceActivityPoller&) = delete;

  // Stops and joins the thread (a Read in progress finishes first); later
  // calls do nothing. Latest keeps answering.
  void Stop();

  // The last successful Read; nullopt before the first.
  std::optional<DeviceActivity> Latest() const;
  // Reads that failed (their error is logged once).
  int64_t failed_reads() const;

 private:
  void Loop();

  const std::unique_ptr<DeviceActivityReader> reader_;
  const absl::Duration period_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<DeviceActivity> latest_ ABSL_GUARDED_BY(mu_);
  int64_t failed_reads_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex join_mu_;  // one Stop joins
  std::thread thread_;
};

// A device and the poller of its counters.
struct PolledDevice {
  DeviceInfo device;
  std::shared_ptr<const DeviceActivityPoller> poller;
};

// Registers the two gauge families in registry and a collect hook that sets
// each device's series from its poller's latest reading. The hook keeps
// the pollers alive.
void AddDeviceActivityMetrics(Registry* registry,
                              std::vector<PolledDevice> devices);

}  // namespace coalesce::metrics
