#include "server/scheduler/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace coalesce {

Scheduler::Scheduler(std::string name, SchedulerOptions options)
    : name_(std::move(name)),
      options_(options),
      slots_(std::max(options.max_in_flight, 1)),
      max_submit_gap_(options.direct_run_max_rate > 0
                          ? 4 / options.direct_run_max_rate
                          : 1.0) {
  absl::MutexLock lock(&mu_);
  last_end_ = std::chrono::steady_clock::now() -
              absl::ToChronoNanoseconds(options_.direct_run_min_idle);
  last_submit_ = std::chrono::steady_clock::now();
  mean_submit_gap_ = max_submit_gap_;
  workers_.reserve(slots_);
  for (int64_t i = 0; i < slots_; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

Scheduler::~Scheduler() { Drain(absl::Now()); }

absl::Status Scheduler::Submit(Job job) {
  if (!job.run || !job.reject) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job for ", name_, " needs both run and reject"));
  }
  if (!job.batch_key.empty() && !job.run_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job for ", name_, " with a batch key needs run_batch"));
  }
  if (job.bytes < 0 || job.batch_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job for ", name_, " has negative bytes ", job.bytes,
                     " or batch bytes ", job.batch_bytes));
  }
  std::vector<Waiting> direct;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status admitted = AdmitLocked(job); !admitted.ok()) {
      return admitted;
    }
    // Idle: run it here, sparing the wake-up of a scheduler thread. No one
    // waits, so fairness loses nothing; nothing runs, so under load (when
    // the submitting thread has other requests to read) the workers serve.
    // A job that could batch also needs a quiet spell: under load the next
    // requests of its kind are moments away, and a worker would batch them.
    const auto now = std::chrono::steady_clock::now();
    // A long pause counts as a few slow gaps, not as a gap that would
    // outweigh a whole window of fast ones.
    const double gap =
        std::min(std::chrono::duration<double>(now - last_submit_).count(),
                 max_submit_gap_);
    last_submit_ = now;
    mean_submit_gap_ += (gap - mean_submit_gap_) / kRateWindow;
    const bool slow_arrivals =
        options_.direct_run_max_rate <= 0 ||
        mean_submit_gap_ * options_.direct_run_max_rate >= 1.0;
    if (job.may_run_directly && slow_arrivals && turns_.empty() &&
        in_flight_ == 0 &&
        (job.batch_key.empty() ||
         (options_.batch_max_delay <= absl::ZeroDuration() &&
          now - last_end_ >=
              absl::ToChronoNanoseconds(options_.direct_run_min_idle)))) {
      ++in_flight_;
      ++running_;
      ++direct_runs_;
      outstanding_seconds_ += job.seconds;
      direct.push_back(Waiting{std::move(job), now});
    } else {
      Enqueue(std::move(job), now);
      return absl::OkStatus();
    }
  }
  const double seconds = direct[0].job.seconds;
  Start(std::move(direct));
  absl::MutexLock lock(&mu_);
  EndedLocked(1, seconds);
  return absl::OkStatus();
}

absl::Status Scheduler::AdmitLocked(const Job& job) const {
  if (draining_) {
    return absl::UnavailableError(absl::StrCat(
        "the server is shutting down: ", name_, " accepts no more requests"));
  }
  if (queued_ >= options_.max_queue_requests) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the queue of ", name_, " is full: ", queued_,
        " requests wait (--max_queue_requests=", options_.max_queue_requests,
        "); retry later"));
  }
  // Written so that it cannot overflow: both sides are non-negative.
  if (queued_ > 0 && job.bytes > options_.max_queue_bytes - queued_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the queue of ", name_, " is full: ", queued_bytes_, " bytes in ",
        queued_, " requests wait and this request has ", job.bytes,
        " (--max_queue_bytes=", options_.max_queue_bytes, "); retry later"));
  }
  return absl::OkStatus();
}

void Scheduler::Enqueue(Job job, std::chrono::steady_clock::time_point now) {
  std::deque<Waiting>& queue = queues_[job.identity];
  if (queue.empty()) turns_.push_back(job.identity);
  ++queued_;
  ++submissions_;
  queued_bytes_ += job.bytes;
  outstanding_seconds_ += job.seconds;
  queue.push_back(Waiting{std::move(job), now});
}

void Scheduler::EndedLocked(int64_t started, double seconds) {
  --running_;
  in_flight_ -= started;
  outstanding_seconds_ -= seconds;
  last_end_ = std::chrono::steady_clock::now();
  // Sums of doubles drift: nothing outstanding is exactly nothing.
  if (queued_ == 0 && in_flight_ == 0) outstanding_seconds_ = 0;
}

Scheduler::Waiting Scheduler::PopFrontLocked(const std::string& identity) {
  auto it = queues_.find(identity);
  Waiting next = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  --queued_;
  queued_bytes_ -= next.job.bytes;
  return next;
}

Scheduler::Waiting Scheduler::PopNextLocked() {
  std::string identity = std::move(turns_.front());
  turns_.pop_front();
  Waiting next = PopFrontLocked(identity);
  // Back of the line: every other waiting identity goes first.
  if (queues_.contains(identity)) turns_.push_back(std::move(identity));
  return next;
}

void Scheduler::FillBatchLocked(std::vector<Waiting>& batch) {
  // A copy: batch grows (and moves its jobs) below.
  const std::string key = batch[0].job.batch_key;
  const size_t max_requests =
      static_cast<size_t>(std::max(options_.batch_max_requests, 1));
  if (key.empty() || max_requests <= 1) return;
  int64_t bytes = batch[0].job.batch_bytes;
  const absl::Time deadline = absl::Now() + options_.batch_max_delay;
  for (;;) {
    // Sweeps over the identities in turn order; one that gave a job goes
    // behind those that did not, as PopNextLocked would have put it.
    bool took = true;
    while (took && batch.size() < max_requests) {
      took = false;
      std::deque<std::string> passed, gave;
      while (!turns_.empty()) {
        std::string identity = std::move(turns_.front());
        turns_.pop_front();
        const Job& front = queues_.find(identity)->second.front().job;
        if (batch.size() >= max_requests || front.batch_key != key ||
            front.batch_bytes > options_.batch_max_bytes - bytes) {
          passed.push_back(std::move(identity));
          continue;
        }
        bytes += front.batch_bytes;
        batch.push_back(PopFrontLocked(identity));
        took = true;
        if (queues_.contains(identity)) gave.push_back(std::move(identity));
      }
      for (std::string& id : passed) turns_.push_back(std::move(id));
      for (std::string& id : gave) turns_.push_back(std::move(id));
    }
    if (batch.size() >= max_requests || stopping_ || draining_ ||
        absl::Now() >= deadline) {
      return;
    }
    // Not full: wait for the next submission (or the deadline) and sweep
    // again.
    const int64_t seen = submissions_;
    // Evaluated by the mutex with mu_ held.
    const auto arrived = [this, seen]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return submissions_ != seen || draining_;
    };
    ++fillers_;
    const bool more =
        mu_.AwaitWithDeadline(absl::Condition(&arrived), deadline);
    --fillers_;
    if (!more) return;
  }
}

void Scheduler::WorkerLoop() {
  for (;;) {
    std::vector<Waiting> batch;
    int64_t started = 0;
    double seconds = 0;
    {
      absl::MutexLock lock(&mu_,
                           absl::Condition(this, &Scheduler::WorkOrStopping));
      if (turns_.empty()) return;  // stopping, and nothing waits
      batch.push_back(PopNextLocked());
      // Counted in flight while the batch waits to fill: it holds a worker.
      ++in_flight_;
      ++running_;
      FillBatchLocked(batch);
      started = static_cast<int64_t>(batch.size());
      in_flight_ += started - 1;
      for (const Waiting& w : batch) seconds += w.job.seconds;
    }
    Start(std::move(batch));  // the jobs (and what they hold) die in there
    absl::MutexLock lock(&mu_);
    EndedLocked(started, seconds);
  }
}

void Scheduler::Start(std::vector<Waiting> batch) {
  const auto now = std::chrono::steady_clock::now();
  // Cancelled jobs leave the batch rejected; the rest start together.
  std::vector<Job> jobs;
  std::vector<double> queue_seconds;
  jobs.reserve(batch.size());
  queue_seconds.reserve(batch.size());
  for (Waiting& waiting : batch) {
    Job& job = waiting.job;
    if (job.cancelled && job.cancelled()) {
      std::move(job.reject)(absl::CancelledError(absl::StrCat(
          "the request was cancelled before it started on ", name_)));
      continue;
    }
    const std::chrono::duration<double> waited = now - waiting.submitted;
    jobs.push_back(std::move(job));
    queue_seconds.push_back(waited.count());
  }
  batch.clear();
  if (jobs.empty()) return;
  if (jobs.size() == 1) {
    std::move(jobs[0].run)(queue_seconds[0]);
    return;
  }
  auto run_batch = std::move(jobs[0].run_batch);
  std::move(run_batch)(std::move(jobs), std::move(queue_seconds));
}

void Scheduler::Drain(absl::Time deadline) {
  std::vector<Waiting> left;
  std::vector<std::thread> workers;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    mu_.AwaitWithDeadline(absl::Condition(this, &Scheduler::NothingWaits),
                          deadline);
    while (!turns_.empty()) {
      left.push_back(PopNextLocked());
      outstanding_seconds_ -= left.back().job.seconds;
    }
    stopping_ = true;
    workers.swap(workers_);
  }
  for (Waiting& waiting : left) {
    std::move(waiting.job.reject)(absl::CancelledError(absl::StrCat(
        "the server is shutting down; the request never started on ", name_)));
  }
  left.clear();
  if (workers.empty()) {
    // Another Drain joins them; return only once it has.
    absl::MutexLock lock(&mu_, absl::Condition(this, &Scheduler::Joined));
    return;
  }
  for (std::thread& worker : workers) worker.join();
  // Jobs run directly by their submitters end on those threads.
  absl::MutexLock lock(&mu_, absl::Condition(this, &Scheduler::NothingRuns));
  joined_ = true;
}

Scheduler::Stats Scheduler::stats() const {
  absl::MutexLock lock(&mu_);
  Stats stats;
  stats.queued = queued_;
  stats.queued_bytes = queued_bytes_;
  stats.in_flight = in_flight_;
  stats.identities_waiting = static_cast<int64_t>(queues_.size());
  stats.outstanding_seconds = outstanding_seconds_;
  stats.direct_runs = direct_runs_;
  return stats;
}

}  // namespace coalesce
