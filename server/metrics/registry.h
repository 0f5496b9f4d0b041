// The server's metric families on prometheus-cpp: a prometheus::Registry,
// plus hooks that refresh the gauges sampled when Prometheus scrapes
// (process and device memory, queue depth). It is the Collectable that the
// /metrics endpoint (HttpServer, prometheus-cpp's Exposer) serves.
//
// Thread-safety: everything here is thread-safe. prometheus-cpp's counters
// and gauges are atomics; a histogram child takes a mutex of its own per
// observation. Family::Add takes the family's lock: call it at start-up or
// cache the child it returns (it stays valid for the Registry's life).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace coalesce::metrics {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using Labels = prometheus::Labels;

class Registry final : public prometheus::Collectable {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // A family per metric name; children are added with their labels
  // (Family::Add; a histogram's with its bucket bounds). An invalid or
  // repeated name is a programmer error (prometheus-cpp throws).
  Family<Counter>& AddCounter(const std::string& name, const std::string& help);
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help);
  Family<Histogram>& AddHistogram(const std::string& name,
                                  const std::string& help);

  // hook runs at the start of every Collect, one collection at a time. It
  // must stay callable for as long as Collect may be called.
  void AddCollectHook(std::function<void()> hook);

  // Runs the hooks, then collects every family that has children.
  std::vector<prometheus::MetricFamily> Collect() const override;
  // Collect in the text exposition format 0.0.4.
  std::string Serialize() const;

 private:
  // Held by Collect throughout, so that two scrapes do not interleave their
  // hooks.
  mutable absl::Mutex collect_mu_;
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(collect_mu_);
  prometheus::Registry families_;
};

// Raises c to total, a running total kept elsewhere (CPU seconds, a cache's
// evictions) and read in a collect hook: a counter only rises, so a total
// at or below c's value leaves it. c must have no other writer.
void RaiseTo(Counter& c, double total);

}  // namespace coalesce::metrics
