#include "server/metrics/device_activity_metrics.h"

#include <string>
#include <utility>

#include "server/metrics/prometheus_service_metrics.h"
#include "spdlog/spdlog.h"

namespace coalesce::metrics {

DeviceActivityPoller::DeviceActivityPoller(
    std::unique_ptr<DeviceActivityReader> reader, absl::Duration period)
    : reader_(std::move(reader)), period_(period) {
  thread_ = std::thread([this] { Loop(); });
}

DeviceActivityPoller::~DeviceActivityPoller() { Stop(); }

void DeviceActivityPoller::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  absl::MutexLock join(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

std::optional<DeviceActivity> DeviceActivityPoller::Latest() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

int64_t DeviceActivityPoller::failed_reads() const {
  absl::MutexLock lock(&mu_);
  return failed_reads_;
}

void DeviceActivityPoller::Loop() {
  bool logged = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Wakes at once on Stop, else after a period.
      mu_.AwaitWithTimeout(absl::Condition(&stop_), period_);
      if (stop_) return;
    }
    absl::StatusOr<DeviceActivity> read = reader_->Read();
    absl::MutexLock lock(&mu_);
    if (read.ok()) {
      latest_ = *read;
      continue;
    }
    ++failed_reads_;
    if (!logged) {
      logged = true;
      spdlog::warn(
          "device counters: a read failed ({}); serving the last good "
          "reading, later failures are not logged",
          read.status().ToString());
    }
  }
}

void AddDeviceActivityMetrics(Registry* registry,
                              std::vector<PolledDevice> devices) {
  Family<Gauge>& occupancy = registry->AddGauge(
      "coalesce_device_sm_occupancy_ratio",
      "The whole device's SM occupancy over the last reading's interval "
      "(about 1 s): warps resident over the SMs' maximum, idle SMs "
      "included; NVML GPM (--profile_sampling=gpm, or sampled's fallback "
      "when another profiler holds CUPTI's).");
  Family<Gauge>& dram = registry->AddGauge(
      "coalesce_device_dram_bytes_per_second",
      "The whole device's DRAM bytes read and written per second over the "
      "last reading's interval (about 1 s): NVML GPM's DRAM bandwidth "
      "utilization times the device's theoretical bandwidth.");
  // A device's series are added with its first reading: before it there
  // is no value to give.
  struct Series {
    Labels labels;
    std::shared_ptr<const DeviceActivityPoller> poller;
    Gauge* occupancy = nullptr;
    Gauge* dram = nullptr;
  };
  auto all = std::make_shared<std::vector<Series>>();
  for (PolledDevice& d : devices) {
    Labels labels = DeviceLabels(d.device);
    labels.emplace("source", "nvml_gpm");
    all->push_back({std::move(labels), std::move(d.poller)});
  }
  registry->AddCollectHook([&occupancy, &dram, all] {
    for (Series& s : *all) {
      const std::optional<DeviceActivity> a = s.poller->Latest();
      if (!a.has_value()) continue;
      if (s.occupancy == nullptr) {
        s.occupancy = &occupancy.Add(s.labels);
        s.dram = &dram.Add(s.labels);
      }
      s.occupancy->Set(a->sm_occupancy);
      s.dram->Set(a->dram_bytes_per_second);
    }
  });
}

}  // namespace coalesce::metrics
