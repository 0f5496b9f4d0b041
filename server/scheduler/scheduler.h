// A per-device request scheduler: decoded requests wait here for one of a
// fixed number of worker threads, so that a device runs at most
// max_in_flight kernels at once and a flood of requests from one caller
// queues behind itself rather than in front of everyone else. A short job
// may instead run on the submitting thread while the scheduler is idle
// (Job::may_run_directly), sparing a thread wake-up.
//
// Admission is bounded (requests and bytes) and never blocks: a full queue
// answers RESOURCE_EXHAUSTED at once so that clients back off instead of
// piling up memory in the server. The next job to start is taken round robin
// over the identities that have jobs waiting; each identity's jobs start in
// the order they were submitted.
//
// Every admitted job ends in exactly one of Job::run or Job::reject, including
// at shutdown and destruction.
//
// Thread-safety: all methods are thread-safe. Drain (and so the destructor)
// must not be called from a scheduler thread, i.e. from inside Job::run or
// Job::reject, since it waits for those threads to finish.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace coalesce {

struct SchedulerOptions {
  // Starts running at once, each a job or a whole batch; one thread each
  // (direct runs take one too). Values below 1 mean 1.
  int max_in_flight = 4;
  // Jobs waiting, all identities together.
  int64_t max_queue_requests = 1024;
  // Sum of Job::bytes of the waiting jobs.
  int64_t max_queue_bytes = int64_t{1} << 30;
  // Batching (Job::batch_key): a batch holds at most batch_max_requests
  // jobs and batch_max_bytes of their Job::batch_bytes (a first job larger
  // than that runs alone). batch_max_requests <= 1 turns batching off.
  int batch_max_requests = 64;
  int64_t batch_max_bytes = int64_t{4} << 20;
  // How long a started batch waits for more jobs of its key to arrive
  // while it is not full; zero: it takes only what already waits, so
  // batching never adds latency to a lone request.
  absl::Duration batch_max_delay = absl::ZeroDuration();
  // A job that could batch (Job::batch_key) runs directly
  // (Job::may_run_directly) only once the scheduler has been idle this long:
  // requests that arrive back to back (under load) go to the workers, which
  // batch them; a lone request, which comes a client round trip after the
  // last one ended, runs directly.
  absl::Duration direct_run_min_idle = absl::Microseconds(50);
  // A job runs directly only while submissions arrive at most this many
  // times a second (a moving mean of the gaps between them, over about the
  // last kRateWindow submissions); zero: at any rate. Under load the device
  // idles in short spells between bursts, and a job run directly in one
  // holds the submitting thread from the rest of its burst; the mean rate
  // tells load from a lone client where the moment does not.
  double direct_run_max_rate = 0;
};

struct Job {
  // The fairness key: the authenticated caller.
  std::string identity;
  // Counted against max_queue_bytes while the job waits (not while it runs:
  // a running job's memory is the device's concern).
  int64_t bytes = 0;
  // The work it brings, in estimated device seconds: counted in
  // Stats::outstanding_seconds from Submit until it ends, so that a server
  // of several devices can send work to the least loaded one.
  double seconds = 0;
  // Asked on the running thread just before the job would start; true: the
  // job never runs and reject gets CANCELLED. May be empty (never cancelled).
  std::function<bool()> cancelled;
  // Runs on a scheduler thread when the job's turn comes (or in Submit, see
  // may_run_directly). queue_seconds: from Submit to this call.
  absl::AnyInvocable<void(double queue_seconds) &&> run;
  // Called once instead of run when the job will never run: cancelled before
  // it started, or still waiting when Drain's deadline passed. Never called
  // for a job whose Submit returned an error.
  absl::AnyInvocable<void(absl::Status why) &&> reject;

  // Batching. Jobs with the same non-empty batch_key may start together:
  // the first one's run_batch is called, instead of each one's run, with
  // all of them (itself first, in the order they would have started) and
  // each one's queue seconds. run_batch then owns every job of the batch:
  // it must end each one (through its own state; the scheduler calls
  // neither run nor reject of a batched job). A batch of one is started
  // through run. Jobs of one key must all have run_batch set.
  std::string batch_key;
  // What this job adds to a batch (SchedulerOptions::batch_max_bytes).
  int64_t batch_bytes = 0;
  // The submitter's own state for the job, for run_batch to reach.
  std::shared_ptr<void> batch_item;
  absl::AnyInvocable<void(std::vector<Job> batch,
                          std::vector<double> queue_seconds) &&>
      run_batch;

  // Short work that may run on the submitting thread: when the scheduler is
  // idle (nothing waits or runs; for a job with a batch key, nothing ended
  // within SchedulerOptions::direct_run_min_idle and the job would not wait
  // to batch; submissions no more frequent than
  // SchedulerOptions::direct_run_max_rate), Submit runs it before returning
  // instead of waking a scheduler thread.
  // It holds a slot and counts in flight meanwhile.
  bool may_run_directly = false;
};

class Scheduler {
 public:
  // name: for messages (e.g. "cuda:0"). Starts options.max_in_flight threads.
  Scheduler(std::string name, SchedulerOptions options);
  // Drain(absl::Now()) (a no-op after an earlier Drain), which joins the
  // threads.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // OK: queued, or run (or rejected, if cancelled) before returning when
  // job.may_run_directly and the scheduler was idle. RESOURCE_EXHAUSTED at once
  // when max_queue_requests jobs wait, or when job.bytes would push the waiting
  // bytes past max_queue_bytes (a job larger than max_queue_bytes is admitted
  // when nothing else waits, so that big requests are not impossible).
  // UNAVAILABLE once Drain began. INVALID_ARGUMENT when run or reject is empty
  // or bytes < 0.
  absl::Status Submit(Job job);

  // Stops admitting; lets waiting jobs start (in fairness order) until
  // `deadline`; then rejects every job still waiting with CANCELLED; then
  // waits for running jobs to return (they watch their own cancellation).
  // Idempotent; concurrent calls all return once the threads are joined, and
  // the earliest deadline wins.
  void Drain(absl::Time deadline);

  struct Stats {
    int64_t queued = 0;
    int64_t queued_bytes = 0;
    int64_t in_flight = 0;
    int64_t identities_waiting = 0;
    // Job::seconds of the jobs waiting or running.
    double outstanding_seconds = 0;
    // Jobs run by their submitters so far (Job::may_run_directly).
    int64_t direct_runs = 0;
  };
  // Cheap: one short lock (read on every metrics scrape).
  Stats stats() const;

 private:
  struct Waiting {
    Job job;
    std::chrono::steady_clock::time_point submitted;
  };

  // The moving mean of the gaps between submissions spans about this many.
  static constexpr int kRateWindow = 64;

  // Submit's bounds: OK when job may be queued or run now.
  absl::Status AdmitLocked(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues job, submitted at now.
  void Enqueue(Job job, std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop();
  // Starts (or, when cancelled, rejects) one job or a batch (batch[0]
  // leads); called without mu_.
  void Start(std::vector<Waiting> batch);
  // The next job in round-robin order over identities; turns_ not empty.
  Waiting PopNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pops the waiting jobs that join `leader`'s batch, into batch: each
  // identity's first job while it has the key and the batch has room, in
  // round-robin order (so a batch keeps fairness and each identity's
  // order); with a delay, waits up to it for the batch to fill.
  void FillBatchLocked(std::vector<Waiting>& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the first job of identity's queue (turns_ is left to the
  // caller); returns it.
  Waiting PopFrontLocked(const std::string& identity)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Returns a start's slot, its jobs and their outstanding seconds.
  void EndedLocked(int64_t started, double seconds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A free slot: jobs run directly by their submitters hold slots too.
  bool WorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (!turns_.empty() && fillers_ == 0 && running_ < slots_) || stopping_;
  }
  bool NothingRuns() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_ == 0;
  }
  bool NothingWaits() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return turns_.empty();
  }
  bool Joined() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return joined_; }

  const std::string name_;
  const SchedulerOptions options_;
  // Starts running at once (a batch is one): max(options_.max_in_flight, 1).
  const int64_t slots_;
  // The longest gap between submissions the moving mean takes in (seconds):
  // four times the one direct_run_max_rate allows.
  const double max_submit_gap_;

  mutable absl::Mutex mu_;
  // One FIFO per identity that has jobs waiting (no empty queues kept).
  absl::flat_hash_map<std::string, std::deque<Waiting>> queues_
      ABSL_GUARDED_BY(mu_);
  // The identities of queues_, in the order they get their next turn.
  std::deque<std::string> turns_ ABSL_GUARDED_BY(mu_);
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Workers waiting for their batch to fill: the others start nothing
  // meanwhile, so that arrivals join that batch instead of each starting
  // a batch of its own (the wait is at most batch_max_delay).
  int fillers_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs submitted so far: a batch that waits for more watches it.
  int64_t submissions_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs started and not ended (a batch counts each of its jobs).
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Starts in progress, each a job or a whole batch on a worker or a direct
  // run: what the slots bound.
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t direct_runs_ ABSL_GUARDED_BY(mu_) = 0;
  // When the last start ended (or the scheduler began): direct runs of jobs
  // that could batch wait for direct_run_min_idle past it.
  std::chrono::steady_clock::time_point last_end_ ABSL_GUARDED_BY(mu_);
  double outstanding_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  // The last submission, and the moving mean of the gaps between
  // submissions (seconds; it starts at max_submit_gap_, so a first job may
  // run directly).
  std::chrono::steady_clock::time_point last_submit_ ABSL_GUARDED_BY(mu_);
  double mean_submit_gap_ ABSL_GUARDED_BY(mu_) = 0;
  // Drain began: Submit refuses.
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // Nothing more will be queued: workers exit once nothing waits.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The threads; taken (emptied) by the one Drain that joins them.
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(mu_);
  bool joined_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace coalesce
