// ServiceMetrics exported to Prometheus: the coalesce_* families (every name,
// unit and label is in docs/METRICS.md), registered in a Registry at
// construction together with the device and build gauges.
//
// Cardinality stays bounded: op, variant, the gRPC code and the device,
// never shapes; with MetricsDetail::kFull the kernel families add dtype and
// a size bucket of the bytes moved (le_1MiB .. le_4GiB, gt_4GiB). Children
// appear on first use (an RPC's series with its first call, a status code's
// with its first answer, a kernel's with its first run), except those of
// the four kernel RPCs, which exist from the start so that rates read 0
// rather than nothing. First uses are cached in fixed tables of atomic
// pointers.
//
// Thread-safe. Every observation after the first of its label combination
// allocates nothing and takes no shared lock but the histogram child's own
// mutex (prometheus-cpp's): array lookups, then the child.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/core/backend.h"
#include "server/metrics/registry.h"
#include "server/metrics/service_metrics.h"
#include "server/metrics/span_union.h"

namespace coalesce::metrics {

// The labels of every device-scoped series: "device" (the name), "gpu" (the
// CUDA ordinal) and "gpu_uuid", as DCGM-exporter's gpu and UUID, so that the
// two join; gpu and gpu_uuid are empty on the CPU backend.
Labels DeviceLabels(const DeviceInfo& device);

// Size buckets of the bytes a kernel moves, by powers of four from 1 MiB
// (below it an H200 kernel is launch-bound whatever its size) to 4 GiB, then
// gt_4GiB; steps of four keep the label at eight values.
inline constexpr int kNumSizeBuckets = 8;
int SizeBucket(int64_t bytes_moved);
absl::string_view SizeBucketName(int bucket);  // "le_1MiB", ..., "gt_4GiB"

// Selection::source values (kernels/selection/heuristic.h, selector.h).
inline constexpr int kNumSelectionSources = 4;
inline constexpr absl::string_view kSelectionSources[kNumSelectionSources] = {
    "forced", "cache", "table", "heuristic"};

// The number of absl::StatusCode values that are gRPC codes
// (OK..UNAUTHENTICATED).
inline constexpr int kNumStatusCodes = 17;

class PrometheusServiceMetrics final : public ServiceMetrics {
 public:
  // Registers the families in registry and sets the device and build gauges
  // from backend (variants, device). registry is not owned and must outlive
  // this object; it keeps a collect hook that reads the device's memory.
  PrometheusServiceMetrics(Registry* registry, const Backend& backend,
                           MetricsDetail detail = MetricsDetail::kBasic);
  ~PrometheusServiceMetrics() override;

  void RpcStarted(Rpc rpc) override;
  void VariantSelected(const Selection& selection) override;
  void BackendStarted(Rpc rpc) override;
  void Launched(Rpc rpc, double queue_seconds) override;
  void KernelRan(const KernelObservation& kernel) override;
  void LaunchServed(OpKind op, int requests) override;
  void RpcFinished(const RpcOutcome& outcome) override;

 private:
  // The children of one RPC, created by its first call.
  struct RpcSeries {
    Gauge* in_flight = nullptr;
    Histogram* duration = nullptr;
    Counter* request_bytes = nullptr;
    Counter* response_bytes = nullptr;
    // Created by the first answer with each code.
    std::array<std::atomic<Counter*>, kNumStatusCodes> codes{};
  };
  // The children of one kernel series (variant, or variant x dtype x size
  // bucket with kFull).
  struct KernelSeries {
    Histogram* seconds = nullptr;
    Histogram* bandwidth = nullptr;
    Histogram* flops = nullptr;  // GEMM only
    // Created by the first observation that carries a launch (GPU variants).
    std::atomic<Gauge*> occupancy{nullptr};
    std::atomic<Gauge*> waves{nullptr};
    // Created by the first sampled (or failed sample) observation, so that
    // a server without --profile_sampling exports none of them.
    std::atomic<Histogram*> achieved_occupancy{nullptr};
    std::atomic<Histogram*> sampled_dram{nullptr};
    std::atomic<Counter*> samples{nullptr};
    std::atomic<Counter*> failed_samples{nullptr};
  };

  RpcSeries& SeriesOf(Rpc rpc);
  int VariantIndex(const KernelVariant* variant) const;
  Labels KernelLabels(const KernelObservation& kernel) const;
  KernelSeries& Series(const KernelObservation& kernel);
  void SetLaunchGauges(const KernelObservation& kernel, KernelSeries& series);
  void ObserveSample(const KernelObservation& kernel, KernelSeries& series);
  void CountFailedSample(const KernelObservation& kernel, KernelSeries& series);

  const MetricsDetail detail_;

  // Per RPC, created on first use (the kernel RPCs' up front).
  Family<Counter>* requests_ = nullptr;
  Family<Histogram>* duration_ = nullptr;
  Family<Gauge>* in_flight_ = nullptr;
  Family<Counter>* request_bytes_ = nullptr;
  Family<Counter>* response_bytes_ = nullptr;
  std::array<std::atomic<RpcSeries*>, kNumRpcs> rpc_series_{};
  // Per kernel RPC (indexed by OpKind).
  std::array<Gauge*, kNumKernelRpcs> queued_{};
  // A device's busy counter and DeviceInfo::event_overhead_seconds (and
  // graph_event_overhead_seconds, for a graph replayed), which each
  // event-timed launch's time loses before it counts; the union of its
  // launches' kernel spans (RunResult::kernel_begin), which it counts where
  // the backend gave them; and its count of graph replays.
  struct DeviceKernelTime {
    Counter* seconds;
    double event_overhead;
    double graph_event_overhead;
    Counter* graph_replays;
    std::unique_ptr<absl::Mutex> mu;
    std::unique_ptr<SpanUnion> spans;
  };
  std::vector<DeviceKernelTime> device_kernel_time_;  // by device index
  std::array<Histogram*, kNumKernelRpcs> queue_seconds_{};
  std::array<Histogram*, kNumKernelRpcs> batch_size_{};
  std::array<Histogram*, kNumKernelRpcs> h2d_seconds_{};
  std::array<Histogram*, kNumKernelRpcs> d2h_seconds_{};

  // Per kernel.
  absl::flat_hash_map<const KernelVariant*, int> variant_index_;
  Family<Counter>* selections_ = nullptr;
  // [variant][source], sources as in kSelectionSources, created on first
  // use; another source goes through the family (locked).
  std::unique_ptr<std::array<std::atomic<Counter*>, kNumSelectionSources>[]>
      selection_counters_;
  Family<Histogram>* kernel_seconds_ = nullptr;
  Family<Histogram>* kernel_bandwidth_ = nullptr;
  Family<Histogram>* kernel_flops_ = nullptr;
  Family<Gauge>* kernel_occupancy_ = nullptr;
  Family<Gauge>* kernel_waves_ = nullptr;
  Family<Histogram>* kernel_achieved_occupancy_ = nullptr;
  Family<Histogram>* kernel_sampled_dram_ = nullptr;
  Family<Counter>* kernel_profile_samples_ = nullptr;
  // The first failed sample is logged with its reason; the rest are only
  // counted.
  std::atomic<bool> sample_error_logged_{false};
  // kBasic: [variant]; kFull: [(variant * 3 + dtype) * kNumSizeBuckets +
  // size bucket]. Owned.
  std::unique_ptr<std::atomic<KernelSeries*>[]> kernel_series_;
  size_t num_kernel_series_ = 0;
};

}  // namespace coalesce::metrics
