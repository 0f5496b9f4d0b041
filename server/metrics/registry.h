// A small Prometheus client shaped like prometheus-cpp (which Debian does not
// package): a Registry of metric families, each a Family<T> with fixed label
// names whose children are Counters, Gauges or Histograms (explicit bucket
// bounds), and the text exposition format 0.0.4 for /metrics.
//
// Thread-safety: everything here is thread-safe. The hot path is lock-free
// and allocation-free: Counter::Increment, Gauge::Set/Increment and
// Histogram::Observe touch only atomics of their own child. Locks are taken
// only to register a family, to add a label child (Family::Add, meant for
// start-up or a first use whose result the caller caches) and to serialize.
// Children live as long as the Registry; references to them stay valid.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace coalesce::metrics {

// A value that only goes up (requests, bytes). Counter names end in _total.
class Counter {
 public:
  struct Options {};
  explicit Counter(const Options& /*options*/) {}
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds v; negative or NaN increments are ignored (a counter never falls).
  void Increment(double v = 1);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down (in flight) or is set (last value seen).
class Gauge {
 public:
  struct Options {};
  explicit Gauge(const Options& /*options*/) {}
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Increment(double v = 1);
  void Decrement(double v = 1) { Increment(-v); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Counts of observations by bucket (value <= upper bound, Prometheus' `le`),
// their sum and count. Buckets are per-child atomic counters (not
// cumulative; cumulated when serialized), so an observation is one binary
// search, one atomic increment and one compare-and-swap loop for the sum.
class Histogram {
 public:
  struct Options {
    // Finite upper bounds, strictly increasing; +Inf is implicit.
    std::vector<double> buckets;
  };
  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;  // == cumulative.back()
  };

  explicit Histogram(const Options& options);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // NaN is ignored; +Inf counts in the +Inf bucket.
  void Observe(double v);
  // The count is the sum of the buckets, so _count always equals the +Inf
  // bucket even while observations race with the snapshot.
  Snapshot Collect() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  const std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds + 1
  std::atomic<double> sum_{0};
};

// Buckets start, start*factor, ..., count of them (prometheus-cpp's
// ExponentialBuckets).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

enum class MetricType { kCounter, kGauge, kHistogram };

// What Registry keeps of every family, whatever its type.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  // Appends this family's HELP, TYPE and sample lines (nothing when it has
  // no children).
  virtual void Serialize(std::string* out) const = 0;

 protected:
  FamilyBase(std::string name, std::string help,
             std::vector<std::string> label_names, MetricType type);
  // HELP and TYPE lines.
  void AppendHeader(std::string* out) const;
  // The sample lines of one child with these label values.
  void AppendChild(const std::vector<std::string>& values, const Counter& c,
                   std::string* out) const;
  void AppendChild(const std::vector<std::string>& values, const Gauge& g,
                   std::string* out) const;
  void AppendChild(const std::vector<std::string>& values, const Histogram& h,
                   std::string* out) const;

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const MetricType type_;
};

// All the children of one metric name, one per combination of label values.
template <typename T>
class Family final : public FamilyBase {
 public:
  Family(std::string name, std::string help,
         std::vector<std::string> label_names, MetricType type,
         typename T::Options options)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names),
                   type),
        options_(std::move(options)) {}

  // The child with these label values (one per label name, in order),
  // created on first use. Takes the family's lock: call it at start-up or
  // cache the result; the reference stays valid for the Registry's life.
  // A wrong number of values is a programmer error (aborts).
  T& Add(const std::vector<std::string>& label_values);

  void Serialize(std::string* out) const override;

 private:
  const typename T::Options options_;
  mutable absl::Mutex mu_;
  // Ordered, so that the exposition is deterministic.
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_
      ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers a family. Names follow Prometheus rules ([a-zA-Z_:][a-zA-Z0-9_:]*
  // for metrics, [a-zA-Z_][a-zA-Z0-9_]* and no leading "__" for labels,
  // counters end in _total, histograms may not use the label "le") and are
  // unique; breaking a rule is a programmer error (aborts).
  Family<Counter>& AddCounter(std::string name, std::string help,
                              std::vector<std::string> label_names);
  Family<Gauge>& AddGauge(std::string name, std::string help,
                          std::vector<std::string> label_names);
  Family<Histogram>& AddHistogram(std::string name, std::string help,
                                  std::vector<std::string> label_names,
                                  std::vector<double> buckets);

  // hook runs at the start of every Serialize, one scrape at a time: for
  // gauges sampled when scraped (process memory). It must stay callable for
  // as long as Serialize may be called.
  void AddCollectHook(std::function<void()> hook);

  // The text exposition format 0.0.4, families in registration order.
  std::string Serialize() const;

 private:
  template <typename T>
  Family<T>& Register(std::string name, std::string help,
                      std::vector<std::string> label_names, MetricType type,
                      typename T::Options options);

  // Held by Serialize throughout, so that two scrapes do not interleave
  // their hooks; taken before mu_.
  mutable absl::Mutex collect_mu_;
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(collect_mu_);
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(collect_mu_);
  std::vector<std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
};

extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

// Exposition helpers, exposed for the tests.
// A sample value as Prometheus parses it and client_golang writes it:
// shortest round-trip digits (exponent form below 1e-4 and from 1e6),
// "+Inf", "-Inf" or "NaN".
std::string FormatValue(double v);
// Label value escaping: backslash, double quote and newline.
std::string EscapeLabelValue(absl::string_view value);

}  // namespace coalesce::metrics
