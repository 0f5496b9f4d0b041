#include "server/metrics/prometheus_service_metrics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/dtype.h"
#include "server/metrics/process_metrics.h"
#include "spdlog/spdlog.h"

namespace coalesce::metrics {

Labels DeviceLabels(const DeviceInfo& device) {
  const bool cuda = device.backend == BackendKind::kCuda;
  return {{"device", device.name},
          {"gpu", cuda || device.simulated ? absl::StrCat(device.ordinal) : ""},
          {"gpu_uuid", cuda ? device.uuid : ""}};
}

namespace {

constexpr int kNumDTypes = 3;

// End-to-end latency: 100 us (a small transpose on a GPU) to a minute (a
// GiB-sized CPU GEMM).
const std::vector<double>& DurationBuckets() {
  static const auto* b = new std::vector<double>{
      1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05,
      0.1,  0.25,   0.5,  1,    2.5,    5,    10,   30,    60};
  return *b;
}

// Stages and kernels: 1 us (a launch-bound kernel) to 10 s.
const std::vector<double>& StageBuckets() {
  static const auto* b = new std::vector<double>{
      1e-6, 2.5e-6, 5e-6,  1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
      5e-3, 0.01,   0.025, 0.05, 0.1,    0.25, 0.5,  1,      2.5,  5,    10};
  return *b;
}

// 100 MB/s (a small CPU request) to 8 TB/s, finer above 1 TB/s where the
// H200's copy peak (about 4 TB/s) lies.
const std::vector<double>& BandwidthBuckets() {
  static const auto* b = new std::vector<double>{
      1e8,  2.5e8,  5e8,  1e9,    2e9,  5e9,    1e10, 2e10,
      5e10, 1e11,   2e11, 5e11,   1e12, 1.5e12, 2e12, 2.5e12,
      3e12, 3.5e12, 4e12, 4.5e12, 5e12, 6e12,   8e12};
  return *b;
}

// Achieved occupancy, 0..1: steps of 0.05 at the top where well-fed
// bandwidth kernels sit, coarser below.
const std::vector<double>& OccupancyBuckets() {
  static const auto* b =
      new std::vector<double>{0.05, 0.1,  0.2, 0.3,  0.4, 0.5,  0.6, 0.65,
                              0.7,  0.75, 0.8, 0.85, 0.9, 0.95, 1.0};
  return *b;
}

// GEMM: 1 GFLOP/s to 2 PFLOP/s (an H200's dense 16-bit peak is about 1e15).
const std::vector<double>& FlopsBuckets() {
  static const auto* b = new std::vector<double>{
      1e9,  1e10, 2.5e10, 5e10, 1e11, 2.5e11, 5e11, 1e12, 2.5e12,
      5e12, 1e13, 2.5e13, 5e13, 1e14, 2.5e14, 5e14, 1e15, 2e15};
  return *b;
}

// MemTotal from /proc/meminfo; 0 when unreadable.
int64_t HostMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kib = 0;
    if (fields.size() >= 2 && fields[0] == "MemTotal:" &&
        absl::SimpleAtoi(fields[1], &kib)) {
      return kib * 1024;
    }
  }
  return 0;
}

Labels OpLabel(Rpc rpc) { return {{"op", std::string(RpcName(rpc))}}; }

// Seconds are measured by steady clocks; a negative figure would be a bug
// upstream, but must not corrupt the histogram's sum.
double NonNegative(double seconds) { return seconds > 0 ? seconds : 0; }

}  // namespace

int SizeBucket(int64_t bytes_moved) {
  int64_t bound = int64_t{1} << 20;
  for (int bucket = 0; bucket < kNumSizeBuckets - 1; ++bucket, bound <<= 2) {
    if (bytes_moved <= bound) return bucket;
  }
  return kNumSizeBuckets - 1;
}

absl::string_view SizeBucketName(int bucket) {
  static constexpr absl::string_view kNames[kNumSizeBuckets] = {
      "le_1MiB",   "le_4MiB", "le_16MiB", "le_64MiB",
      "le_256MiB", "le_1GiB", "le_4GiB",  "gt_4GiB"};
  return kNames[bucket];
}

PrometheusServiceMetrics::PrometheusServiceMetrics(Registry* registry,
                                                   const Backend& backend,
                                                   MetricsDetail detail)
    : detail_(detail) {
  const DeviceInfo& device = backend.device();
  // Every coalesce_device_* series is labelled by its device's
  // DeviceLabels.
  const int devices = backend.device_count();

  // ---- Requests.
  requests_ = &registry->AddCounter(
      "coalesce_requests_total", "RPCs answered, by op and gRPC status code.");
  duration_ = &registry->AddHistogram(
      "coalesce_request_duration_seconds",
      "Time from an RPC entering its handler to its return, errors included "
      "(excludes gRPC transport and (de)serialization).");
  in_flight_ = &registry->AddGauge("coalesce_requests_in_flight",
                                   "RPCs inside their handler now.");
  request_bytes_ =
      &registry->AddCounter("coalesce_request_bytes_total",
                            "Serialized size of the requests received.");
  response_bytes_ = &registry->AddCounter(
      "coalesce_response_bytes_total",
      "Serialized size of the successful responses sent.");
  for (std::atomic<RpcSeries*>& series : rpc_series_) {
    series.store(nullptr, std::memory_order_relaxed);
  }
  for (int op = 0; op < kNumKernelRpcs; ++op) {
    RpcSeries& series = SeriesOf(static_cast<Rpc>(op));
    series.codes[0].store(
        &requests_->Add({{"op", std::string(RpcName(static_cast<Rpc>(op)))},
                         {"code", "OK"}}),
        std::memory_order_release);
  }

  // ---- Where a kernel request's time goes.
  Family<Gauge>& queued = registry->AddGauge(
      "coalesce_requests_queued",
      "Kernel RPCs in their handler that have not yet reached the backend "
      "(decoding, waiting in the device queue, selection, output "
      "allocation).");
  Family<Histogram>& queue_seconds = registry->AddHistogram(
      "coalesce_request_queue_seconds",
      "Time from an RPC entering its handler to its launch: decoding, the "
      "wait in the device queue, selection, output allocation and the wait "
      "for a free stream.");
  Family<Histogram>& h2d_seconds = registry->AddHistogram(
      "coalesce_request_h2d_seconds",
      "Host-to-device copy time of a successful kernel RPC (0 on the CPU "
      "backend, which computes in place).");
  Family<Histogram>& d2h_seconds = registry->AddHistogram(
      "coalesce_request_d2h_seconds",
      "Device-to-host copy time of a successful kernel RPC (0 on the CPU "
      "backend).");
  Family<Histogram>& batch_size = registry->AddHistogram(
      "coalesce_batch_size",
      "Requests served by one device launch: 1 for a request run alone, N "
      "for a batch of N (--batch_ops).");
  for (int op = 0; op < kNumKernelRpcs; ++op) {
    const Labels label = OpLabel(static_cast<Rpc>(op));
    batch_size_[op] = &batch_size.Add(
        label, Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256});
    queued_[op] = &queued.Add(label);
    queue_seconds_[op] = &queue_seconds.Add(label, StageBuckets());
    h2d_seconds_[op] = &h2d_seconds.Add(label, StageBuckets());
    d2h_seconds_[op] = &d2h_seconds.Add(label, StageBuckets());
  }

  // ---- How busy each device is.
  Family<Counter>& kernel_total = registry->AddCounter(
      "coalesce_device_kernel_seconds_total",
      "Time the device ran kernels of warm runs, in seconds: the union of "
      "the launches' spans across its streams, each less "
      "coalesce_device_event_overhead_seconds; its rate is the fraction "
      "of the time the device ran kernels.");
  Family<Gauge>& overhead_family = registry->AddGauge(
      "coalesce_device_event_overhead_seconds",
      "What the CUDA events that time a launch add to its span: the span of "
      "an empty kernel between them, measured at start-up (0 on the CPU "
      "backend).");
  Family<Gauge>& graph_overhead_family = registry->AddGauge(
      "coalesce_device_graph_event_overhead_seconds",
      "The same for a launch replayed as a CUDA graph with its events: the "
      "span of an empty kernel's graph between them, measured at start-up "
      "(0 on the CPU backend).");
  Family<Counter>& graph_replays_family = registry->AddCounter(
      "coalesce_device_graph_replays_total",
      "Requests whose launches were a CUDA graph replayed: a call on stored "
      "operands that the same stream ran before (the same variant, problem "
      "and operand addresses), one driver call instead of several.");
  Family<Gauge>& busy_family = registry->AddGauge(
      "coalesce_device_busy_ratio",
      "Kernel time over wall time since the previous scrape (rate of "
      "coalesce_device_kernel_seconds_total).");
  for (int i = 0; i < devices; ++i) {
    const Labels labels = DeviceLabels(backend.device_at(i));
    Counter* kernel = &kernel_total.Add(labels);
    const double overhead = backend.device_at(i).event_overhead_seconds;
    const double graph_overhead =
        backend.device_at(i).graph_event_overhead_seconds;
    // A launch's span arrives when its caller has read its events, a
    // moment after it ended; one second covers any caller's delay.
    device_kernel_time_.push_back(
        {kernel, overhead, graph_overhead, &graph_replays_family.Add(labels),
         std::make_unique<absl::Mutex>(), std::make_unique<SpanUnion>(1.0)});
    overhead_family.Add(labels).Set(overhead);
    graph_overhead_family.Add(labels).Set(graph_overhead);
    Gauge& busy = busy_family.Add(labels);
    registry->AddCollectHook(
        [&busy, kernel,
         last = std::make_shared<std::pair<absl::Time, double>>(absl::Now(),
                                                                0.0)] {
          const absl::Time now = absl::Now();
          const double seconds = kernel->Value();
          const double wall = absl::ToDoubleSeconds(now - last->first);
          if (wall > 0) busy.Set((seconds - last->second) / wall);
          *last = {now, seconds};
        });
  }

  // ---- Kernels.
  kernel_seconds_ = &registry->AddHistogram(
      "coalesce_kernel_seconds",
      "Kernel time of a successful request as the backend timed it (CUDA "
      "events on the GPU, a steady clock on the CPU).");
  kernel_bandwidth_ = &registry->AddHistogram(
      "coalesce_kernel_bandwidth_bytes_per_second",
      "Achieved bandwidth: the minimum bytes the op must move (inputs read "
      "once, outputs written once) over the kernel time.");
  kernel_flops_ = &registry->AddHistogram(
      "coalesce_kernel_flops_per_second",
      "Achieved FLOP/s of GEMM kernels: 2*m*n*k plus the alpha/beta "
      "epilogue per matrix, over the kernel time.");
  kernel_occupancy_ = &registry->AddGauge(
      "coalesce_kernel_theoretical_occupancy_ratio",
      "Theoretical occupancy of the last request's largest launch (resident "
      "warps per SM over the maximum, from the occupancy API and the launch "
      "configuration); GPU variants only.");
  kernel_waves_ = &registry->AddGauge(
      "coalesce_kernel_waves",
      "Waves of the last request's largest launch: blocks over (SMs x "
      "resident blocks per SM); GPU variants only.");
  // Device-sampled counters (--profile_sampling=sampled): only the requests
  // whose launch the backend sampled.
  kernel_achieved_occupancy_ = &registry->AddHistogram(
      "coalesce_kernel_achieved_occupancy_ratio",
      "Achieved occupancy of a sampled request's kernels: warps active per "
      "active cycle over the SM's maximum, averaged over SMs, weighted by "
      "kernel time (CUPTI sm__warps_active.avg.pct_of_peak_sustained_active "
      "/ 100).");
  kernel_sampled_dram_ = &registry->AddHistogram(
      "coalesce_kernel_sampled_dram_bytes_per_second",
      "DRAM bytes read and written by a sampled request's kernels over their "
      "GPU time (CUPTI dram__bytes.sum / gpu__time_duration.sum).");
  kernel_profile_samples_ = &registry->AddCounter(
      "coalesce_kernel_profile_samples_total",
      "Launches the backend picked for device-counter sampling, by outcome: "
      "sampled, or failed (a profiler error or other work inside the range; "
      "the request itself succeeded).");

  // ---- Selection.
  selections_ = &registry->AddCounter(
      "coalesce_selections_total",
      "Kernel variants chosen, by how they were chosen (source: forced by "
      "the request, the tuning cache, the shipped table or the roofline "
      "heuristic).");
  const std::vector<const KernelVariant*> variants = backend.registry().All();
  selection_counters_ = std::make_unique<
      std::array<std::atomic<Counter*>, kNumSelectionSources>[]>(
      variants.size());
  for (size_t i = 0; i < variants.size(); ++i) {
    variant_index_[variants[i]] = static_cast<int>(i);
    for (std::atomic<Counter*>& c : selection_counters_[i]) {
      c.store(nullptr, std::memory_order_relaxed);
    }
  }
  // Variants that keep per-shape plans (cuBLASLt): how full the bounded
  // cache runs, and how often it drops a plan that a later call rebuilds.
  {
    Family<Gauge>& plans = registry->AddGauge(
        "coalesce_variant_plans",
        "Per-shape plans a variant keeps cached (cuBLASLt's heuristic "
        "choices), all devices.");
    Family<Gauge>& capacity = registry->AddGauge(
        "coalesce_variant_plan_capacity",
        "The most plans a variant keeps; past it the least recently used "
        "plan is dropped.");
    Family<Counter>& evictions = registry->AddCounter(
        "coalesce_variant_plan_evictions_total",
        "Plans dropped to make room; a shape whose plan was dropped pays the "
        "heuristic again on its next call.");
    for (const KernelVariant* v : variants) {
      const std::optional<PlanCacheStats> stats = v->plan_cache();
      if (!stats.has_value()) continue;
      const Labels label = {{"variant", std::string(v->name())}};
      capacity.Add(label).Set(static_cast<double>(stats->capacity));
      registry->AddCollectHook(
          [v, &gauge = plans.Add(label), &counter = evictions.Add(label)] {
            const std::optional<PlanCacheStats> now = v->plan_cache();
            if (!now.has_value()) return;
            gauge.Set(static_cast<double>(now->plans));
            RaiseTo(counter, static_cast<double>(now->evictions));
          });
    }
  }
  num_kernel_series_ =
      variants.size() *
      (detail_ == MetricsDetail::kFull ? kNumDTypes * kNumSizeBuckets : 1);
  kernel_series_ =
      std::make_unique<std::atomic<KernelSeries*>[]>(num_kernel_series_);
  for (size_t i = 0; i < num_kernel_series_; ++i) {
    kernel_series_[i].store(nullptr, std::memory_order_relaxed);
  }

  // ---- Devices and build.
  const bool cpu = device.backend == BackendKind::kCpu;
  Family<Gauge>& total_family = registry->AddGauge(
      "coalesce_device_memory_total_bytes",
      "Memory of the device (host MemTotal for the CPU backend).");
  Family<Gauge>& pinned_family = registry->AddGauge(
      "coalesce_device_pinned_staging_bytes",
      cpu ? "Pinned host memory held for staging copies (0: the CPU backend "
            "stages nothing)."
          : "Pinned host memory held for staging copies.");
  Family<Gauge>& used_family = registry->AddGauge(
      "coalesce_device_memory_used_bytes",
      cpu ? "Device memory in use (the process's resident set for the CPU "
            "backend)."
          : "Device memory in use, by every process (cudaMemGetInfo).");
  Family<Gauge>* pool_family =
      cpu ? nullptr
          : &registry->AddGauge("coalesce_device_pool_reserved_bytes",
                                "Device memory held by the server's "
                                "stream-ordered allocation pool.");
  Family<Gauge>* cache_family =
      cpu ? nullptr
          : &registry->AddGauge(
                "coalesce_device_block_cache_bytes",
                "Device memory of released tensors kept for the next tensor "
                "of their size (part of the pool's reserved bytes).");
  Family<Gauge>* peak_family =
      device.measured_copy_bandwidth > 0
          ? &registry->AddGauge(
                "coalesce_device_copy_peak_bytes_per_second",
                "Device copy bandwidth (read + write) measured at start-up: "
                "divide a kernel's bandwidth by it for the fraction of the "
                "peak.")
          : nullptr;
  Family<Gauge>& healthy_family = registry->AddGauge(
      "coalesce_device_healthy",
      "1 while the device serves; 0 once it failed (a sticky CUDA error): "
      "requests go to the other devices.");
  struct DeviceGauges {
    Gauge* used;
    Gauge* pinned;
    Gauge* pool;   // null on the CPU
    Gauge* cache;  // null on the CPU
    Gauge* healthy;
  };
  std::vector<DeviceGauges> gauges;
  const double host_memory = cpu ? static_cast<double>(HostMemoryBytes()) : 0;
  for (int i = 0; i < devices; ++i) {
    const DeviceInfo& d = backend.device_at(i);
    const Labels labels = DeviceLabels(d);
    total_family.Add(labels).Set(cpu ? host_memory
                                     : static_cast<double>(d.memory_bytes));
    gauges.push_back(
        {&used_family.Add(labels), &pinned_family.Add(labels),
         pool_family == nullptr ? nullptr : &pool_family->Add(labels),
         cache_family == nullptr ? nullptr : &cache_family->Add(labels),
         &healthy_family.Add(labels)});
    if (cpu) gauges.back().pinned->Set(0);
    if (peak_family != nullptr && d.measured_copy_bandwidth > 0) {
      peak_family->Add(labels).Set(d.measured_copy_bandwidth);
    }
  }
  // Read from the backend on every scrape (cudaMemGetInfo and the
  // stream-ordered pool's attributes on the CUDA backend). On the CPU the
  // process's resident set is the device memory in use, read once (simulated
  // devices share it, and each reports it).
  registry->AddCollectHook([gauges = std::move(gauges), b = &backend, cpu] {
    const double resident = cpu ? ProcessResidentBytes() : 0;
    for (int i = 0; i < static_cast<int>(gauges.size()); ++i) {
      const DeviceGauges& g = gauges[i];
      g.healthy->Set(b->HealthOf(i).ok() ? 1 : 0);
      if (cpu) {
        g.used->Set(resident);
        continue;
      }
      const MemoryStats m = b->MemoryOf(i);
      if (m.used_bytes >= 0) g.used->Set(static_cast<double>(m.used_bytes));
      if (m.pool_reserved_bytes >= 0 && g.pool != nullptr) {
        g.pool->Set(static_cast<double>(m.pool_reserved_bytes));
      }
      if (m.block_cache_bytes >= 0 && g.cache != nullptr) {
        g.cache->Set(static_cast<double>(m.block_cache_bytes));
      }
      g.pinned->Set(static_cast<double>(m.pinned_staging_bytes));
    }
  });
  registry
      ->AddGauge("coalesce_build_info",
                 "Build and backend of this server (value 1).")
      .Add({{"version", COALESCE_VERSION},
            {"git_sha", COALESCE_GIT_SHA},
            {"backend", std::string(BackendName(device.backend))},
            {"cuda_runtime", device.runtime_version}})
      .Set(1);
}

PrometheusServiceMetrics::~PrometheusServiceMetrics() {
  for (size_t i = 0; i < num_kernel_series_; ++i) {
    delete kernel_series_[i].load(std::memory_order_relaxed);
  }
  for (std::atomic<RpcSeries*>& series : rpc_series_) {
    delete series.load(std::memory_order_relaxed);
  }
}

PrometheusServiceMetrics::RpcSeries& PrometheusServiceMetrics::SeriesOf(
    Rpc rpc) {
  std::atomic<RpcSeries*>& slot = rpc_series_[static_cast<int>(rpc)];
  RpcSeries* series = slot.load(std::memory_order_acquire);
  if (series != nullptr) return *series;
  // First call of this RPC. Family::Add returns the same children to racing
  // threads; the loser of the exchange frees only its own struct.
  const Labels label = OpLabel(rpc);
  auto fresh = std::make_unique<RpcSeries>();
  fresh->in_flight = &in_flight_->Add(label);
  fresh->duration = &duration_->Add(label, DurationBuckets());
  fresh->request_bytes = &request_bytes_->Add(label);
  fresh->response_bytes = &response_bytes_->Add(label);
  for (std::atomic<Counter*>& c : fresh->codes) {
    c.store(nullptr, std::memory_order_relaxed);
  }
  if (slot.compare_exchange_strong(series, fresh.get(),
                                   std::memory_order_acq_rel)) {
    return *fresh.release();
  }
  return *series;
}

void PrometheusServiceMetrics::RpcStarted(Rpc rpc) {
  SeriesOf(rpc).in_flight->Increment();
  if (RunsKernel(rpc)) queued_[static_cast<int>(rpc)]->Increment();
}

int PrometheusServiceMetrics::VariantIndex(const KernelVariant* variant) const {
  const auto it = variant_index_.find(variant);
  if (it == variant_index_.end()) {
    // Variants come from the backend's registry, fixed before the server
    // starts: anything else is a programmer error.
    std::fprintf(stderr, "metrics: variant %.*s is not the backend's\n",
                 static_cast<int>(variant->name().size()),
                 variant->name().data());
    std::abort();
  }
  return it->second;
}

void PrometheusServiceMetrics::VariantSelected(const Selection& selection) {
  // The labels are built only where the child is looked up by them: once
  // per variant and known source, every time for another source.
  const auto labels = [&selection]() -> Labels {
    return {{"op", std::string(OpName(selection.variant->op()))},
            {"variant", std::string(selection.variant->name())},
            {"source", selection.source}};
  };
  const int v = VariantIndex(selection.variant);
  for (int s = 0; s < kNumSelectionSources; ++s) {
    if (selection.source != kSelectionSources[s]) continue;
    std::atomic<Counter*>& slot = selection_counters_[v][s];
    Counter* counter = slot.load(std::memory_order_acquire);
    if (counter == nullptr) {
      // Family::Add returns the same child to racing threads.
      counter = &selections_->Add(labels());
      slot.store(counter, std::memory_order_release);
    }
    counter->Increment();
    return;
  }
  selections_->Add(labels()).Increment();
}

void PrometheusServiceMetrics::BackendStarted(Rpc rpc) {
  queued_[static_cast<int>(rpc)]->Decrement();
}

void PrometheusServiceMetrics::Launched(Rpc rpc, double queue_seconds) {
  queue_seconds_[static_cast<int>(rpc)]->Observe(NonNegative(queue_seconds));
}

void PrometheusServiceMetrics::LaunchServed(OpKind op, int requests) {
  batch_size_[static_cast<int>(RpcOf(op))]->Observe(requests);
}

Labels PrometheusServiceMetrics::KernelLabels(
    const KernelObservation& kernel) const {
  Labels labels = {{"op", std::string(OpName(kernel.op))},
                   {"variant", std::string(kernel.variant->name())}};
  if (detail_ == MetricsDetail::kFull) {
    labels.emplace("dtype", std::string(DTypeName(kernel.dtype)));
    labels.emplace("size_bucket",
                   std::string(SizeBucketName(SizeBucket(kernel.bytes_moved))));
  }
  return labels;
}

PrometheusServiceMetrics::KernelSeries& PrometheusServiceMetrics::Series(
    const KernelObservation& kernel) {
  size_t index = VariantIndex(kernel.variant);
  if (detail_ == MetricsDetail::kFull) {
    index = (index * kNumDTypes + static_cast<int>(kernel.dtype)) *
                kNumSizeBuckets +
            SizeBucket(kernel.bytes_moved);
  }
  std::atomic<KernelSeries*>& slot = kernel_series_[index];
  KernelSeries* series = slot.load(std::memory_order_acquire);
  if (series != nullptr) return *series;
  // First use of this combination. Family::Add returns the same children to
  // racing threads; the loser of the exchange frees only its own struct.
  const Labels labels = KernelLabels(kernel);
  auto fresh = std::make_unique<KernelSeries>();
  fresh->seconds = &kernel_seconds_->Add(labels, StageBuckets());
  fresh->bandwidth = &kernel_bandwidth_->Add(labels, BandwidthBuckets());
  if (kernel.op == OpKind::kGemm) {
    fresh->flops = &kernel_flops_->Add(labels, FlopsBuckets());
  }
  if (slot.compare_exchange_strong(series, fresh.get(),
                                   std::memory_order_acq_rel)) {
    return *fresh.release();
  }
  return *series;
}

void PrometheusServiceMetrics::SetLaunchGauges(const KernelObservation& kernel,
                                               KernelSeries& series) {
  Gauge* occupancy = series.occupancy.load(std::memory_order_acquire);
  Gauge* waves = series.waves.load(std::memory_order_acquire);
  if (occupancy == nullptr || waves == nullptr) {
    const Labels labels = KernelLabels(kernel);
    occupancy = &kernel_occupancy_->Add(labels);
    waves = &kernel_waves_->Add(labels);
    series.occupancy.store(occupancy, std::memory_order_release);
    series.waves.store(waves, std::memory_order_release);
  }
  occupancy->Set(kernel.run.launch.theoretical_occupancy);
  waves->Set(kernel.run.launch.waves);
}

void PrometheusServiceMetrics::ObserveSample(const KernelObservation& kernel,
                                             KernelSeries& series) {
  Histogram* occupancy =
      series.achieved_occupancy.load(std::memory_order_acquire);
  Histogram* dram = series.sampled_dram.load(std::memory_order_acquire);
  Counter* samples = series.samples.load(std::memory_order_acquire);
  if (occupancy == nullptr || dram == nullptr || samples == nullptr) {
    // Family::Add returns the same children to racing threads.
    Labels labels = KernelLabels(kernel);
    occupancy = &kernel_achieved_occupancy_->Add(labels, OccupancyBuckets());
    dram = &kernel_sampled_dram_->Add(labels, BandwidthBuckets());
    labels.emplace("outcome", "sampled");
    samples = &kernel_profile_samples_->Add(labels);
    series.achieved_occupancy.store(occupancy, std::memory_order_release);
    series.sampled_dram.store(dram, std::memory_order_release);
    series.samples.store(samples, std::memory_order_release);
  }
  occupancy->Observe(kernel.run.achieved_occupancy);
  dram->Observe(kernel.run.dram_bytes_per_second);
  samples->Increment();
}

void PrometheusServiceMetrics::CountFailedSample(
    const KernelObservation& kernel, KernelSeries& series) {
  Counter* failed = series.failed_samples.load(std::memory_order_acquire);
  if (failed == nullptr) {
    Labels labels = KernelLabels(kernel);
    labels.emplace("outcome", "failed");
    failed = &kernel_profile_samples_->Add(labels);
    series.failed_samples.store(failed, std::memory_order_release);
  }
  failed->Increment();
  if (!sample_error_logged_.exchange(true, std::memory_order_relaxed)) {
    spdlog::warn(
        "device-counter sampling failed for {} ({}); this and later "
        "failures are counted in "
        "coalesce_kernel_profile_samples_total{{outcome=\"failed\"}}",
        std::string(kernel.variant->name()),
        kernel.run.sample_error.ToString());
  }
}

void PrometheusServiceMetrics::KernelRan(const KernelObservation& kernel) {
  const int op = static_cast<int>(kernel.op);
  const size_t device = static_cast<size_t>(kernel.run.device);
  if (device < device_kernel_time_.size()) {
    const DeviceKernelTime& time = device_kernel_time_[device];
    const RunResult& run = kernel.run;
    const double event_overhead =
        run.graph_replayed ? time.graph_event_overhead : time.event_overhead;
    if (run.graph_replayed) time.graph_replays->Increment();
    if (run.kernel_end > run.kernel_begin) {
      // Concurrent launches on other streams overlap this one: only the
      // part of its span that none of theirs covered counts.
      const double end =
          std::max(run.kernel_begin, run.kernel_end - event_overhead);
      absl::MutexLock lock(time.mu.get());
      time.seconds->Increment(time.spans->Add(run.kernel_begin, end));
    } else {
      // A sampled launch's time is the kernels' own (CUPTI), with no events.
      const double overhead = run.sampled ? 0.0 : event_overhead;
      time.seconds->Increment(NonNegative(run.kernel_seconds - overhead));
    }
  }
  h2d_seconds_[op]->Observe(NonNegative(kernel.run.h2d_seconds));
  d2h_seconds_[op]->Observe(NonNegative(kernel.run.d2h_seconds));
  KernelSeries& series = Series(kernel);
  if (!kernel.run.sample_error.ok()) {
    // The launch may have run under the profiler: its event-timed figures
    // can include the profiler's overhead and stay out of the histograms.
    CountFailedSample(kernel, series);
  } else {
    series.seconds->Observe(NonNegative(kernel.run.kernel_seconds));
    if (kernel.bytes_per_second > 0) {
      series.bandwidth->Observe(kernel.bytes_per_second);
    }
    if (series.flops != nullptr && kernel.flops_per_second > 0) {
      series.flops->Observe(kernel.flops_per_second);
    }
  }
  if (kernel.run.sampled) ObserveSample(kernel, series);
  // CPU variants launch nothing: no occupancy to report.
  if (kernel.run.launch.launches > 0) SetLaunchGauges(kernel, series);
}

void PrometheusServiceMetrics::RpcFinished(const RpcOutcome& outcome) {
  int code = static_cast<int>(outcome.code);
  if (code < 0 || code >= kNumStatusCodes) {
    code = static_cast<int>(absl::StatusCode::kUnknown);
  }
  RpcSeries& series = SeriesOf(outcome.rpc);
  Counter* requests = series.codes[code].load(std::memory_order_acquire);
  if (requests == nullptr) {
    // Family::Add returns the same child to racing threads.
    requests = &requests_->Add(
        {{"op", std::string(RpcName(outcome.rpc))},
         {"code",
          absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}});
    series.codes[code].store(requests, std::memory_order_release);
  }
  requests->Increment();
  series.duration->Observe(NonNegative(outcome.seconds));
  series.request_bytes->Increment(static_cast<double>(outcome.request_bytes));
  series.response_bytes->Increment(static_cast<double>(outcome.response_bytes));
  series.in_flight->Decrement();
  if (RunsKernel(outcome.rpc) && !outcome.reached_backend) {
    queued_[static_cast<int>(outcome.rpc)]->Decrement();
  }
}

}  // namespace coalesce::metrics
