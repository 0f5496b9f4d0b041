#include "server/metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace coalesce::metrics {
namespace {

// Registration mistakes are programmer errors, caught by the first test run.
[[noreturn]] void Die(absl::string_view what) {
  std::fprintf(stderr, "metrics registry: %.*s\n",
               static_cast<int>(what.size()), what.data());
  std::abort();
}

// Adds v to a with a compare-and-swap loop (std::atomic<double>::fetch_add
// is C++20).
void AtomicAdd(std::atomic<double>& a, double v) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

bool ValidName(absl::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = absl::ascii_isalpha(c) || c == '_' ||
                    (allow_colon && c == ':') ||
                    (i > 0 && absl::ascii_isdigit(c));
    if (!ok) return false;
  }
  return true;
}

// HELP text escaping: backslash and newline.
std::string EscapeHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (const char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

absl::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// One sample line: name+suffix, the labels (values escaped) plus an optional
// `le`, the value. Unlabelled series are written bare, as client libraries
// write them.
void AppendSample(std::string* out, absl::string_view name,
                  absl::string_view suffix,
                  const std::vector<std::string>& names,
                  const std::vector<std::string>& values, absl::string_view le,
                  absl::string_view value) {
  absl::StrAppend(out, name, suffix);
  if (!names.empty() || !le.empty()) {
    out->push_back('{');
    for (size_t i = 0; i < names.size(); ++i) {
      absl::StrAppend(out, i > 0 ? "," : "", names[i], "=\"",
                      EscapeLabelValue(values[i]), "\"");
    }
    if (!le.empty()) {
      absl::StrAppend(out, names.empty() ? "" : ",", "le=\"", le, "\"");
    }
    out->push_back('}');
  }
  absl::StrAppend(out, " ", value, "\n");
}

}  // namespace

void Counter::Increment(double v) {
  if (!(v >= 0)) return;
  AtomicAdd(value_, v);
}

void Gauge::Increment(double v) { AtomicAdd(value_, v); }

Histogram::Histogram(const Options& options)
    : bounds_(options.buckets),
      counts_(new std::atomic<uint64_t>[options.buckets.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    counts_[i].store(0, std::memory_order_relaxed);
  }
}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  // First bound >= v: Prometheus buckets are upper-inclusive (`le`).
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

Histogram::Snapshot Histogram::Collect() const {
  Snapshot s;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> buckets;
  buckets.reserve(count);
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) buckets.push_back(bound);
  return buckets;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest digits that parse back to v, laid out as Go's
  // strconv.FormatFloat(v, 'g', -1, 64) lays them out (what client_golang
  // writes): an exponent only below 1e-4 or from 1e6 up. Histogram `le`
  // labels then match other exporters' exactly, so they aggregate.
  char buffer[48];
  const std::to_chars_result scientific = std::to_chars(
      buffer, buffer + sizeof(buffer), v, std::chars_format::scientific);
  const char* e = std::find(buffer, scientific.ptr, 'e');
  int exponent = 0;
  std::from_chars(e + (e[1] == '+' ? 2 : 1), scientific.ptr, exponent);
  if (exponent < -4 || exponent >= 6)
    return std::string(buffer, scientific.ptr);
  const std::to_chars_result fixed = std::to_chars(
      buffer, buffer + sizeof(buffer), v, std::chars_format::fixed);
  return std::string(buffer, fixed.ptr);
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

FamilyBase::FamilyBase(std::string name, std::string help,
                       std::vector<std::string> label_names, MetricType type)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      type_(type) {
  if (!ValidName(name_, /*allow_colon=*/true)) {
    Die(absl::StrCat("invalid metric name '", name_, "'"));
  }
  if (type_ == MetricType::kCounter && !absl::EndsWith(name_, "_total")) {
    Die(absl::StrCat("counter '", name_, "' must end in _total"));
  }
  for (const std::string& label : label_names_) {
    if (!ValidName(label, /*allow_colon=*/false) ||
        absl::StartsWith(label, "__")) {
      Die(absl::StrCat(name_, ": invalid label name '", label, "'"));
    }
    if (type_ == MetricType::kHistogram && label == "le") {
      Die(absl::StrCat(name_, ": 'le' is reserved for histogram buckets"));
    }
    if (std::count(label_names_.begin(), label_names_.end(), label) > 1) {
      Die(absl::StrCat(name_, ": label '", label, "' repeated"));
    }
  }
}

void FamilyBase::AppendHeader(std::string* out) const {
  absl::StrAppend(out, "# HELP ", name_, " ", EscapeHelp(help_), "\n",
                  "# TYPE ", name_, " ", TypeName(type_), "\n");
}

void FamilyBase::AppendChild(const std::vector<std::string>& values,
                             const Counter& c, std::string* out) const {
  AppendSample(out, name_, "", label_names_, values, "",
               FormatValue(c.Value()));
}

void FamilyBase::AppendChild(const std::vector<std::string>& values,
                             const Gauge& g, std::string* out) const {
  AppendSample(out, name_, "", label_names_, values, "",
               FormatValue(g.Value()));
}

void FamilyBase::AppendChild(const std::vector<std::string>& values,
                             const Histogram& h, std::string* out) const {
  const Histogram::Snapshot s = h.Collect();
  const std::vector<double>& bounds = h.bounds();
  for (size_t i = 0; i <= bounds.size(); ++i) {
    AppendSample(out, name_, "_bucket", label_names_, values,
                 i < bounds.size() ? FormatValue(bounds[i]) : "+Inf",
                 absl::StrCat(s.cumulative[i]));
  }
  AppendSample(out, name_, "_sum", label_names_, values, "",
               FormatValue(s.sum));
  AppendSample(out, name_, "_count", label_names_, values, "",
               absl::StrCat(s.count));
}

template <typename T>
T& Family<T>::Add(const std::vector<std::string>& label_values) {
  if (label_values.size() != label_names_.size()) {
    Die(absl::StrCat(name_, ": ", label_values.size(), " label values for ",
                     label_names_.size(), " labels"));
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<T>& child = children_[label_values];
  if (child == nullptr) child = std::make_unique<T>(options_);
  return *child;
}

template <typename T>
void Family<T>::Serialize(std::string* out) const {
  absl::MutexLock lock(&mu_);
  if (children_.empty()) return;
  AppendHeader(out);
  for (const auto& [values, child] : children_) {
    AppendChild(values, *child, out);
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

template <typename T>
Family<T>& Registry::Register(std::string name, std::string help,
                              std::vector<std::string> label_names,
                              MetricType type, typename T::Options options) {
  auto family = std::make_unique<Family<T>>(std::move(name), std::move(help),
                                            std::move(label_names), type,
                                            std::move(options));
  Family<T>& ref = *family;
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_) {
    if (f->name() == ref.name()) {
      Die(absl::StrCat("metric '", ref.name(), "' registered twice"));
    }
  }
  families_.push_back(std::move(family));
  return ref;
}

Family<Counter>& Registry::AddCounter(std::string name, std::string help,
                                      std::vector<std::string> label_names) {
  return Register<Counter>(std::move(name), std::move(help),
                           std::move(label_names), MetricType::kCounter, {});
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help,
                                  std::vector<std::string> label_names) {
  return Register<Gauge>(std::move(name), std::move(help),
                         std::move(label_names), MetricType::kGauge, {});
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help,
                                          std::vector<std::string> label_names,
                                          std::vector<double> buckets) {
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!std::isfinite(buckets[i]) || (i > 0 && buckets[i] <= buckets[i - 1])) {
      Die(absl::StrCat(name, ": buckets must be finite and increasing"));
    }
  }
  return Register<Histogram>(std::move(name), std::move(help),
                             std::move(label_names), MetricType::kHistogram,
                             Histogram::Options{std::move(buckets)});
}

void Registry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&collect_mu_);
  hooks_.push_back(std::move(hook));
}

std::string Registry::Serialize() const {
  absl::MutexLock collect_lock(&collect_mu_);
  for (const std::function<void()>& hook : hooks_) hook();
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& family : families_) family->Serialize(&out);
  return out;
}

}  // namespace coalesce::metrics
