// Picks the variant for each request: "automatic" means the fastest
// variant for this shape on this device. Sources, in order:
//   1. the tuning cache (online autotuning on this device, persisted),
//   2. the shipped table (measured offline on a device of the same name),
//   3. the roofline heuristic (SelectVariant), which works anywhere.
// A cached or tabled winner is used only if it can run the exact problem
// (a key covers a bucket of shapes); otherwise the next source answers.
// Autotuning (--autotune): on a miss, every eligible variant is timed on
// scratch buffers of the request's shape (Backend::Benchmark, never the
// user's buffers), once per key (single-flight: concurrent requests for a
// key being tuned take the heuristic choice), within a time budget; the
// winner goes into the cache and the cache file.
//   on_miss: the first request of a new key queues the tuning on a
//            background thread and proceeds with the heuristic choice;
//   eager:   the first request of a new key tunes inline and uses the
//            winner (paying the tuning time once).
// Thread-safe; Select on a cache hit takes a shared lock and no tuning.
// Select remembers its answer for each exact problem while the cache and
// the table are unchanged, so a repeated request skips the key, the
// lookups and the heuristic (most of a selection's cost).
#pragma once

#include <array>
#include <deque>
#include <functional>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/core/backend.h"
#include "kernels/selection/heuristic.h"
#include "kernels/selection/tuning_store.h"

namespace coalesce {

enum class AutotuneMode { kOff, kOnMiss, kEager };
bool ParseAutotuneMode(absl::string_view s, AutotuneMode* out);

struct SelectorOptions {
  AutotuneMode autotune = AutotuneMode::kOff;
  // GPU time one key's tuning may take; variants are timed in order of
  // their heuristic estimate, so the likely winners are timed first.
  double budget_seconds = 0.25;
  // Time one ExplainSelection measure may take (the variant being timed
  // when it runs out finishes; at least one is timed).
  double measure_budget_seconds = 30;
  std::string cache_path;  // empty: the cache lives in memory only
  std::string table_path;  // empty: no shipped table
  std::string build_id;    // invalidates cache files of other builds
};

// What one request allows Select to do beyond choosing.
struct SelectContext {
  // Whether a miss may start a tuning: tuning spends GPU time on the
  // server's behalf, which only the admin role may ask for.
  bool may_tune = true;
  // Asked between the timed runs of an eager tuning: true stops it (the
  // caller's deadline passed or it went away) and the heuristic choice
  // stands.
  std::function<bool()> cancelled;
};

struct Candidate {
  std::string variant;
  bool eligible = false;
  std::string why_not;           // when not eligible
  double estimate_seconds = 0;   // roofline heuristic
  double measured_seconds = -1;  // from the cache or table, if timed
};

struct Explanation {
  std::string key;
  std::vector<Candidate> candidates;  // every variant of the op
  Selection chosen;
};

class Selector {
 public:
  // backend must outlive the selector.
  Selector(Backend* backend, SelectorOptions options);
  ~Selector();

  // Loads the table and the cache files; a missing file is fine, a foreign
  // or corrupt one is ignored and described in *warnings (never fatal).
  void Init(std::vector<std::string>* warnings);

  absl::StatusOr<Selection> Select(const Problem& p, absl::string_view forced,
                                   const SelectContext& context = {});
  Explanation Explain(const Problem& p);

  // Times every eligible variant of p within the budget and records the
  // winner in the cache (and its file). Used by autotuning and by tests.
  // cancelled, asked between runs, ends it early with CANCELLED.
  absl::StatusOr<TunedChoice> Tune(const Problem& p,
                                   std::function<bool()> cancelled = nullptr);

  // Times the eligible variants of p (Backend::Benchmark on scratch
  // buffers, rotated past the L2 cache), likeliest winners first, within
  // options' measure_budget_seconds, fastest first, and changes nothing:
  // ExplainSelection's measure, which `coalesce tune` sweeps with.
  // cancelled is asked between runs: true ends the measurement with
  // CANCELLED (the caller's deadline passed or it went away).
  absl::StatusOr<TunedChoice> Measure(
      const Problem& p, std::function<bool()> cancelled = nullptr);

  std::string KeyOf(const Problem& p) const;
  const TuningStore& cache() const { return cache_; }
  const TuningStore& table() const { return table_; }
  // Completed tunings and their total GPU time (for metrics).
  int64_t tunings() const;
  double tuning_seconds() const;

 private:
  // Cache, then table, then heuristic: Select's answer before any tuning.
  absl::StatusOr<Selection> Choose(const std::string& key,
                                   const Problem& p) const;
  // Choose's answer for p, from the memo while the stores are unchanged.
  absl::StatusOr<Selection> ChooseRemembered(const Problem& p);
  std::shared_ptr<const TunedChoice> Lookup(const std::string& key,
                                            const Problem& p,
                                            const TuningStore& store,
                                            const KernelVariant** v) const;
  // The eligible variants of p timed with opts, in order of their estimate,
  // until budget_seconds is spent (at least one is timed); fastest first.
  absl::StatusOr<TunedChoice> TimeVariants(const Problem& p,
                                           const BenchmarkOptions& opts,
                                           double budget_seconds);
  // Entries of s measured against another variant set of their op (their
  // keys can never match); the ops concerned in *ops.
  size_t StaleEntries(const TuningStore& s, std::string* ops) const;
  bool BeginTuning(const std::string& key);
  void EndTuning(const std::string& key);
  void TunerLoop();

  Backend* backend_;
  SelectorOptions opts_;
  // VariantSetVersion of each op, indexed by OpKind: the last field of
  // the op's keys.
  std::array<std::string, std::size(kAllOps)> op_versions_;
  TuningStore cache_;
  TuningStore table_;

  mutable absl::Mutex mu_;
  std::set<std::string> in_flight_ ABSL_GUARDED_BY(mu_);
  std::deque<Problem> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t tunings_ ABSL_GUARDED_BY(mu_) = 0;
  double tuning_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex save_mu_;  // serializes cache file writes

  // Choose's answers by exact problem, valid for one generation of the
  // cache and the table together. Bounded: full, it starts over, so a
  // stream of new shapes cannot grow it.
  static constexpr size_t kMemoCapacity = 1024;
  mutable absl::Mutex memo_mu_;
  absl::flat_hash_map<Problem, Selection, ProblemHash, ProblemEq> memo_
      ABSL_GUARDED_BY(memo_mu_);
  uint64_t memo_generation_ ABSL_GUARDED_BY(memo_mu_) = 0;
  std::thread tuner_;
};

}  // namespace coalesce
