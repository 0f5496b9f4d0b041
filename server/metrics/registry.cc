#include "server/metrics/registry.h"

#include <utility>

#include "prometheus/text_serializer.h"

namespace coalesce::metrics {

Family<Counter>& Registry::AddCounter(const std::string& name,
                                      const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(families_);
}

Family<Gauge>& Registry::AddGauge(const std::string& name,
                                  const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(families_);
}

Family<Histogram>& Registry::AddHistogram(const std::string& name,
                                          const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(families_);
}

void Registry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&collect_mu_);
  hooks_.push_back(std::move(hook));
}

std::vector<prometheus::MetricFamily> Registry::Collect() const {
  absl::MutexLock lock(&collect_mu_);
  for (const std::function<void()>& hook : hooks_) hook();
  return families_.Collect();
}

void RaiseTo(Counter& c, double total) {
  const double now = c.Value();
  if (total > now) c.Increment(total - now);
}

std::string Registry::Serialize() const {
  return prometheus::TextSerializer().Serialize(Collect());
}

}  // namespace coalesce::metrics
