#include "kernels/selection/selector.h"

#include <algorithm>
#include <chrono>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/selection/selection_key.h"

namespace coalesce {
namespace {

// Tuning runs: enough to rank variants (differences under ~5% are noise at
// this count and do not matter for the 10%-of-best quality bar).
constexpr int kTuneWarmup = 1;
constexpr int kTuneReps = 5;
// Measure (the offline sweep): every variant, median of more runs, inputs
// rotated over a footprint past the H200's 60 MB L2 as the bench does.
constexpr int kMeasureWarmup = 2;
constexpr int kMeasureReps = 30;
constexpr int64_t kMeasureFootprintBytes = int64_t{128} << 20;

std::string MicroSeconds(double s) {
  return absl::StrFormat("%.3g us", s * 1e6);
}

}  // namespace

bool ParseAutotuneMode(absl::string_view s, AutotuneMode* out) {
  if (s == "off") {
    *out = AutotuneMode::kOff;
  } else if (s == "on_miss") {
    *out = AutotuneMode::kOnMiss;
  } else if (s == "eager") {
    *out = AutotuneMode::kEager;
  } else {
    return false;
  }
  return true;
}

Selector::Selector(Backend* backend, SelectorOptions options)
    : backend_(backend),
      opts_(std::move(options)),
      cache_({opts_.build_id, DeviceKey(backend->device()),
              VariantSetVersions(backend->registry())}),
      table_({"any", DeviceKey(backend->device()),
              VariantSetVersions(backend->registry())}) {
  for (OpKind op : kAllOps) {
    op_versions_[static_cast<int>(op)] =
        VariantSetVersion(backend->registry(), op);
  }
  if (opts_.autotune == AutotuneMode::kOnMiss) {
    tuner_ = std::thread([this] { TunerLoop(); });
  }
}

Selector::~Selector() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (tuner_.joinable()) tuner_.join();
}

void Selector::Init(std::vector<std::string>* warnings) {
  for (auto [path, store, what] :
       {std::make_tuple(&opts_.table_path, &table_, "tuning table"),
        std::make_tuple(&opts_.cache_path, &cache_, "tuning cache")}) {
    if (path->empty()) continue;
    absl::Status s = store->Load(*path);
    if (!s.ok()) {
      warnings->push_back(absl::StrCat(what, " ignored: ", s.message()));
      continue;
    }
    std::string ops;
    if (const size_t stale = StaleEntries(*store, &ops); stale > 0) {
      warnings->push_back(
          absl::StrCat(what, ": ", stale, " of ", store->size(),
                       " entries were measured against another set of ", ops,
                       " variants and are not used (re-tune those ops)"));
    }
  }
}

std::string Selector::KeyOf(const Problem& p) const {
  return SelectionKey(p, backend_->device(),
                      op_versions_[static_cast<int>(OpOf(p))]);
}

size_t Selector::StaleEntries(const TuningStore& s, std::string* ops) const {
  size_t stale = 0;
  for (const std::string& key : s.Keys()) {
    const std::optional<OpKind> op = OpOfKey(key);
    if (op.has_value() &&
        VersionOfKey(key) == op_versions_[static_cast<int>(*op)]) {
      continue;
    }
    ++stale;
    const absl::string_view op_name =
        absl::string_view(key).substr(0, key.find('|'));
    if (!absl::StrContains(*ops, op_name)) {
      absl::StrAppend(ops, ops->empty() ? "" : ", ", op_name);
    }
  }
  return stale;
}

std::shared_ptr<const TunedChoice> Selector::Lookup(
    const std::string& key, const Problem& p, const TuningStore& store,
    const KernelVariant** v) const {
  std::shared_ptr<const TunedChoice> c = store.Lookup(key);
  if (c == nullptr) return nullptr;
  const KernelVariant* found = backend_->registry().Find(c->winner);
  if (found == nullptr || !found->CanImplement(p, backend_->device()).ok()) {
    return nullptr;
  }
  *v = found;
  return c;
}

absl::StatusOr<Selection> Selector::Choose(const std::string& key,
                                           const Problem& p) const {
  const KernelVariant* v = nullptr;
  if (auto c = Lookup(key, p, cache_, &v)) {
    return Selection{
        v, "cache",
        absl::StrCat("tuned on this device: ", MicroSeconds(c->seconds),
                     ", fastest of ", c->measured.size())};
  }
  if (auto c = Lookup(key, p, table_, &v)) {
    return Selection{v, "table",
                     absl::StrCat("shipped table for ", backend_->device().name,
                                  ": ", MicroSeconds(c->seconds),
                                  ", fastest of ", c->measured.size())};
  }
  return SelectVariant(backend_->registry(), p, backend_->device(), "");
}

absl::StatusOr<Selection> Selector::Select(const Problem& p,
                                           absl::string_view forced,
                                           const SelectContext& context) {
  if (!forced.empty()) {
    return SelectVariant(backend_->registry(), p, backend_->device(), forced);
  }
  absl::StatusOr<Selection> h = ChooseRemembered(p);
  if (!h.ok() || h->source != "heuristic" ||
      opts_.autotune == AutotuneMode::kOff) {
    return h;
  }
  const std::string key = KeyOf(p);
  if (!context.may_tune) {
    h->reason += " (not tuned: tuning needs the admin role)";
    return h;
  }
  if (!BeginTuning(key)) {
    h->reason += " (this shape is being tuned)";
    return h;
  }
  if (opts_.autotune == AutotuneMode::kOnMiss) {
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back(p);
    }
    h->reason += " (tuning queued)";
    return h;
  }
  absl::StatusOr<TunedChoice> tuned = Tune(p, context.cancelled);
  EndTuning(key);
  const KernelVariant* v = nullptr;
  if (tuned.ok() && Lookup(key, p, cache_, &v) != nullptr) {
    return Selection{v, "cache",
                     absl::StrCat("tuned now: ", MicroSeconds(tuned->seconds),
                                  ", fastest of ", tuned->measured.size())};
  }
  return h;
}

absl::StatusOr<Selection> Selector::ChooseRemembered(const Problem& p) {
  // Both stores only grow their generations, so the sum names one state.
  const uint64_t generation = cache_.generation() + table_.generation();
  {
    absl::ReaderMutexLock lock(&memo_mu_);
    if (memo_generation_ == generation) {
      if (auto it = memo_.find(p); it != memo_.end()) return it->second;
    }
  }
  absl::StatusOr<Selection> s = Choose(KeyOf(p), p);
  if (!s.ok()) return s;
  absl::MutexLock lock(&memo_mu_);
  // An answer of an older generation than the memo's is not kept; a newer
  // one starts the memo over.
  if (generation < memo_generation_) return s;
  if (generation > memo_generation_ || memo_.size() >= kMemoCapacity) {
    memo_.clear();
    memo_generation_ = generation;
  }
  memo_.emplace(p, *s);
  return s;
}

bool Selector::BeginTuning(const std::string& key) {
  absl::MutexLock lock(&mu_);
  return in_flight_.insert(key).second;
}

void Selector::EndTuning(const std::string& key) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(key);
}

void Selector::TunerLoop() {
  for (;;) {
    Problem p;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Selector* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stop_ || !s->queue_.empty();
          },
          this));
      if (stop_) return;
      p = queue_.front();
      queue_.pop_front();
    }
    // Errors leave the key untuned; the next miss queues it again.
    (void)Tune(p);
    EndTuning(KeyOf(p));
  }
}

absl::StatusOr<TunedChoice> Selector::TimeVariants(const Problem& p,
                                                   const BenchmarkOptions& opts,
                                                   double budget_seconds) {
  const DeviceInfo& dev = backend_->device();
  std::vector<std::pair<double, const KernelVariant*>> order;
  for (const KernelVariant* v :
       EligibleVariants(backend_->registry(), p, dev)) {
    order.emplace_back(v->EstimateSeconds(p, dev), v);
  }
  if (order.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("no variant supports ", Describe(p)));
  }
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  TunedChoice c;
  const auto start = std::chrono::steady_clock::now();
  auto spent = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  for (const auto& [estimate, v] : order) {
    if (!c.measured.empty() && spent() > budget_seconds) break;
    absl::StatusOr<BenchmarkResult> r = backend_->Benchmark(*v, p, opts);
    if (r.status().code() == absl::StatusCode::kCancelled) return r.status();
    if (r.ok())
      c.measured.emplace_back(std::string(v->name()), r->median_seconds);
  }
  if (c.measured.empty()) {
    return absl::InternalError(
        absl::StrCat("no variant could be timed for ", Describe(p)));
  }
  std::sort(c.measured.begin(), c.measured.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  c.winner = c.measured.front().first;
  c.seconds = c.measured.front().second;
  return c;
}

absl::StatusOr<TunedChoice> Selector::Tune(const Problem& p,
                                           std::function<bool()> cancelled) {
  BenchmarkOptions bo;
  bo.cancelled = std::move(cancelled);
  bo.warmup = kTuneWarmup;
  bo.reps = kTuneReps;
  bo.min_footprint_bytes = 0;  // one buffer set: ranking, not absolute figures
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<TunedChoice> c = TimeVariants(p, bo, opts_.budget_seconds);
  {
    absl::MutexLock lock(&mu_);
    ++tunings_;
    tuning_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  }
  if (!c.ok()) return c;
  cache_.Put(KeyOf(p), *c);
  if (!opts_.cache_path.empty()) {
    absl::MutexLock lock(&save_mu_);
    // A failed write costs only persistence; the in-memory choice stands.
    (void)cache_.Save(opts_.cache_path);
  }
  return c;
}

absl::StatusOr<TunedChoice> Selector::Measure(const Problem& p,
                                              std::function<bool()> cancelled) {
  BenchmarkOptions bo;
  bo.warmup = kMeasureWarmup;
  bo.reps = kMeasureReps;
  bo.min_footprint_bytes = kMeasureFootprintBytes;
  bo.cancelled = std::move(cancelled);
  return TimeVariants(p, bo, opts_.measure_budget_seconds);
}

Explanation Selector::Explain(const Problem& p) {
  Explanation e;
  e.key = KeyOf(p);
  const DeviceInfo& dev = backend_->device();
  std::shared_ptr<const TunedChoice> cached = cache_.Lookup(e.key);
  std::shared_ptr<const TunedChoice> tabled = table_.Lookup(e.key);
  for (const KernelVariant* v : backend_->registry().ForOp(OpOf(p))) {
    if (v->backend() != dev.backend) continue;
    Candidate c;
    c.variant = std::string(v->name());
    absl::Status ok = v->CanImplement(p, dev);
    c.eligible = ok.ok();
    if (!ok.ok()) c.why_not = std::string(ok.message());
    c.estimate_seconds = v->EstimateSeconds(p, dev);
    for (const auto& store : {cached, tabled}) {
      if (store == nullptr || c.measured_seconds >= 0) continue;
      for (const auto& [name, s] : store->measured) {
        if (name == c.variant) c.measured_seconds = s;
      }
    }
    e.candidates.push_back(std::move(c));
  }
  // What Select would answer, without starting a tuning.
  absl::StatusOr<Selection> chosen = Choose(e.key, p);
  if (chosen.ok()) e.chosen = *std::move(chosen);
  return e;
}

int64_t Selector::tunings() const {
  absl::MutexLock lock(&mu_);
  return tunings_;
}

double Selector::tuning_seconds() const {
  absl::MutexLock lock(&mu_);
  return tuning_seconds_;
}

}  // namespace coalesce
