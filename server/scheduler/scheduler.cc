#include "server/scheduler/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace coalesce {

Scheduler::Scheduler(std::string name, SchedulerOptions options)
    : name_(std::move(name)), options_(options) {
  const int threads = std::max(options_.max_in_flight, 1);
  absl::MutexLock lock(&mu_);
  workers_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

Scheduler::~Scheduler() { Drain(absl::Now()); }

absl::Status Scheduler::Submit(Job job) {
  if (!job.run || !job.reject) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job for ", name_, " needs both run and reject"));
  }
  if (job.bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job for ", name_, " has negative bytes ", job.bytes));
  }
  absl::MutexLock lock(&mu_);
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
  std::deque<Waiting>& queue = queues_[job.identity];
  if (queue.empty()) turns_.push_back(job.identity);
  ++queued_;
  queued_bytes_ += job.bytes;
  queue.push_back(Waiting{std::move(job), std::chrono::steady_clock::now()});
  return absl::OkStatus();
}

Scheduler::Waiting Scheduler::PopNextLocked() {
  std::string identity = std::move(turns_.front());
  turns_.pop_front();
  auto it = queues_.find(identity);
  Waiting next = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) {
    queues_.erase(it);
  } else {
    // Back of the line: every other waiting identity goes first.
    turns_.push_back(std::move(identity));
  }
  --queued_;
  queued_bytes_ -= next.job.bytes;
  return next;
}

void Scheduler::WorkerLoop() {
  for (;;) {
    Waiting next;
    {
      absl::MutexLock lock(&mu_,
                           absl::Condition(this, &Scheduler::WorkOrStopping));
      if (turns_.empty()) return;  // stopping, and nothing waits
      next = PopNextLocked();
      ++in_flight_;
    }
    Start(std::move(next));  // the job (and what it holds) dies in there
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
}

void Scheduler::Start(Waiting waiting) {
  Job& job = waiting.job;
  if (job.cancelled && job.cancelled()) {
    std::move(job.reject)(absl::CancelledError(absl::StrCat(
        "the request was cancelled before it started on ", name_)));
    return;
  }
  const std::chrono::duration<double> waited =
      std::chrono::steady_clock::now() - waiting.submitted;
  std::move(job.run)(waited.count());
}

void Scheduler::Drain(absl::Time deadline) {
  std::vector<Waiting> left;
  std::vector<std::thread> workers;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    mu_.AwaitWithDeadline(absl::Condition(this, &Scheduler::NothingWaits),
                          deadline);
    while (!turns_.empty()) left.push_back(PopNextLocked());
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
  absl::MutexLock lock(&mu_);
  joined_ = true;
}

Scheduler::Stats Scheduler::stats() const {
  absl::MutexLock lock(&mu_);
  Stats stats;
  stats.queued = queued_;
  stats.queued_bytes = queued_bytes_;
  stats.in_flight = in_flight_;
  stats.identities_waiting = static_cast<int64_t>(queues_.size());
  return stats;
}

}  // namespace coalesce
