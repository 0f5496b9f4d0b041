// ServiceMetrics exported to Prometheus: the coalesce_* families (every name,
// unit and label is in docs/METRICS.md), registered in a Registry at
// construction together with the device and build gauges.
//
// Cardinality stays bounded: op, variant, dtype, a size bucket of the bytes
// moved (le_1MiB .. le_4GiB, gt_4GiB), the gRPC code and the device, never
// shapes. Children that every deployment has (op x code, op, variant x
// selection source) are created up front; the per-kernel children
// (variant x dtype x size bucket, up to a few thousand series) are created on
// first use and cached in a fixed table of atomic pointers, so that a scrape
// shows only combinations that ran.
//
// Thread-safe. Every observation after the first of its label combination is
// lock-free and allocation-free: array and hash-map lookups built at
// construction, then the atomics of the children.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "kernels/core/backend.h"
#include "server/metrics/registry.h"
#include "server/metrics/service_metrics.h"

namespace coalesce::metrics {

// The labels of every device-scoped series: "device" (the name), "gpu" (the
// CUDA ordinal) and "gpu_uuid", as DCGM-exporter's gpu and UUID, so that the
// two join; gpu and gpu_uuid are empty on the CPU backend.
std::vector<std::string> DeviceLabelNames();
std::vector<std::string> DeviceLabelValues(const DeviceInfo& device);

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
  // this object; it keeps a collect hook that reads the process's memory.
  PrometheusServiceMetrics(Registry* registry, const Backend& backend);
  ~PrometheusServiceMetrics() override;

  void RpcStarted(Rpc rpc) override;
  void VariantSelected(const Selection& selection) override;
  void BackendStarted(Rpc rpc) override;
  void Launched(Rpc rpc, double queue_seconds) override;
  void KernelRan(const KernelObservation& kernel) override;
  void LaunchServed(OpKind op, int requests) override;
  void RpcFinished(const RpcOutcome& outcome) override;

 private:
  // The children of one variant x dtype x size bucket.
  struct KernelSeries {
    Histogram* seconds = nullptr;
    Histogram* bandwidth = nullptr;
    Histogram* utilization = nullptr;  // null without a measured copy peak
    Histogram* flops = nullptr;        // GEMM only
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

  int VariantIndex(const KernelVariant* variant) const;
  KernelSeries& Series(const KernelObservation& kernel);
  void SetLaunchGauges(const KernelObservation& kernel, KernelSeries& series);
  void ObserveSample(const KernelObservation& kernel, KernelSeries& series);
  void CountFailedSample(const KernelObservation& kernel, KernelSeries& series);

  const bool have_copy_peak_;

  // Per RPC.
  std::array<std::array<Counter*, kNumStatusCodes>, kNumRpcs> requests_{};
  std::array<Histogram*, kNumRpcs> duration_{};
  std::array<Gauge*, kNumRpcs> in_flight_{};
  std::array<Counter*, kNumRpcs> request_bytes_{};
  std::array<Counter*, kNumRpcs> response_bytes_{};
  // Per kernel RPC (indexed by OpKind).
  std::array<Gauge*, kNumKernelRpcs> queued_{};
  Counter* device_kernel_seconds_ = nullptr;
  std::array<Histogram*, kNumKernelRpcs> queue_seconds_{};
  std::array<Histogram*, kNumKernelRpcs> batch_size_{};
  std::array<Histogram*, kNumKernelRpcs> h2d_seconds_{};
  std::array<Histogram*, kNumKernelRpcs> d2h_seconds_{};

  // Per kernel.
  absl::flat_hash_map<const KernelVariant*, int> variant_index_;
  Family<Counter>* selections_ = nullptr;
  // [variant][source], sources as in kSelectionSources; another source
  // would go through the family (locked).
  std::unique_ptr<std::array<Counter*, kNumSelectionSources>[]>
      selection_counters_;
  Family<Histogram>* kernel_seconds_ = nullptr;
  Family<Histogram>* kernel_bandwidth_ = nullptr;
  Family<Histogram>* kernel_utilization_ = nullptr;
  Family<Histogram>* kernel_flops_ = nullptr;
  Family<Gauge>* kernel_occupancy_ = nullptr;
  Family<Gauge>* kernel_waves_ = nullptr;
  Family<Histogram>* kernel_achieved_occupancy_ = nullptr;
  Family<Histogram>* kernel_sampled_dram_ = nullptr;
  Family<Counter>* kernel_profile_samples_ = nullptr;
  // The first failed sample is logged with its reason; the rest are only
  // counted.
  std::atomic<bool> sample_error_logged_{false};
  // [(variant * 3 + dtype) * kNumSizeBuckets + size bucket], owned.
  std::unique_ptr<std::atomic<KernelSeries*>[]> kernel_series_;
  size_t num_kernel_series_ = 0;
};

}  // namespace coalesce::metrics
