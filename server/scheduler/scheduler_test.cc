#include "server/scheduler/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;

// Occupies every worker of a scheduler until Release() or destruction (or,
// as a safety net against a hung test, a minute). The constructor returns
// once all workers are running the blocking jobs, so later jobs are known to
// wait. Declared after the Scheduler, a failed assertion releases the workers
// before the Scheduler's destructor waits for them.
class Blocker {
 public:
  Blocker(Scheduler& scheduler, int workers) {
    auto started = std::make_shared<std::atomic<int>>(0);
    for (int i = 0; i < workers; ++i) {
      Job job;
      job.identity = "blocker";
      job.run = [state = state_, started](double) {
        started->fetch_add(1);
        if (!state->release.WaitForNotificationWithTimeout(absl::Minutes(1))) {
          ADD_FAILURE() << "blocker never released";
        }
      };
      job.reject = [](absl::Status status) {
        ADD_FAILURE() << "blocker rejected: " << status;
      };
      EXPECT_TRUE(scheduler.Submit(std::move(job)).ok());
    }
    while (started->load() < workers) absl::SleepFor(absl::Milliseconds(1));
  }
  ~Blocker() { Release(); }
  Blocker(const Blocker&) = delete;
  Blocker& operator=(const Blocker&) = delete;

  // Thread-safe; only the first call notifies.
  void Release() {
    if (!state_->released.exchange(true)) state_->release.Notify();
  }

 private:
  struct State {
    std::atomic<bool> released{false};
    absl::Notification release;
  };
  // Shared with the jobs: they may still be waking when the Blocker is gone.
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

// A job that must never be rejected, running `body`.
Job RunOnly(std::string identity, int64_t bytes,
            absl::AnyInvocable<void(double) &&> body) {
  Job job;
  job.identity = std::move(identity);
  job.bytes = bytes;
  job.run = std::move(body);
  job.reject = [](absl::Status status) {
    ADD_FAILURE() << "unexpected reject: " << status;
  };
  return job;
}

TEST(SchedulerTest, ManySubmittersEveryJobRunsOnceWithItsOwnPayload) {
  constexpr int kThreads = 16;
  constexpr int kPerThread = 500;
  constexpr int kMaxInFlight = 4;
  SchedulerOptions options;
  options.max_in_flight = kMaxInFlight;
  options.max_queue_requests = kThreads * kPerThread;  // none refused
  auto scheduler = std::make_unique<Scheduler>("cpu:0", options);

  std::vector<uint64_t> expected(kThreads * kPerThread);
  std::vector<uint64_t> got(kThreads * kPerThread, 0);
  std::vector<std::atomic<int>> runs(kThreads * kPerThread);
  std::atomic<int> rejects{0};
  std::atomic<int> in_flight{0};
  std::atomic<int> peak{0};

  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      for (int j = 0; j < kPerThread; ++j) {
        const int slot = t * kPerThread + j;
        const uint64_t payload = rng();
        expected[slot] = payload;  // written before Submit, read after join
        Job job;
        job.identity = absl::StrCat("caller", rng() % 7);
        job.bytes = static_cast<int64_t>(rng() % 4096);
        const int sleep_us = static_cast<int>(rng() % 40);
        // Half may run on this thread when the scheduler is idle: they
        // hold slots as the workers' jobs do.
        job.may_run_directly = rng() % 2 == 0;
        job.run = [&, slot, payload, sleep_us](double queue_seconds) {
          const int now = in_flight.fetch_add(1) + 1;
          int seen = peak.load();
          while (now > seen && !peak.compare_exchange_weak(seen, now)) {
          }
          EXPECT_GE(queue_seconds, 0.0);
          if (sleep_us > 0) absl::SleepFor(absl::Microseconds(sleep_us));
          got[slot] = payload;
          runs[slot].fetch_add(1);
          in_flight.fetch_sub(1);
        };
        job.reject = [&](absl::Status) { rejects.fetch_add(1); };
        ASSERT_TRUE(scheduler->Submit(std::move(job)).ok());
        if (j % 64 == 0) {
          EXPECT_LE(scheduler->stats().in_flight, kMaxInFlight);
        }
      }
    });
  }
  for (std::thread& s : submitters) s.join();
  scheduler->Drain(absl::Now() + absl::Seconds(120));

  EXPECT_EQ(rejects.load(), 0);
  for (int i = 0; i < kThreads * kPerThread; ++i) {
    ASSERT_EQ(runs[i].load(), 1) << "slot " << i;
    ASSERT_EQ(got[i], expected[i]) << "slot " << i;
  }
  EXPECT_LE(peak.load(), kMaxInFlight);
  EXPECT_GE(peak.load(), 1);
  const Scheduler::Stats stats = scheduler->stats();
  EXPECT_EQ(stats.queued, 0);
  EXPECT_EQ(stats.queued_bytes, 0);
  EXPECT_EQ(stats.in_flight, 0);
  EXPECT_EQ(stats.identities_waiting, 0);
}

TEST(SchedulerTest, CancelledBeforeLaunchIsRejectedAndNeverRuns) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  Scheduler scheduler("cuda:0", options);
  Blocker blocker(scheduler, 1);

  std::mt19937 rng(42);
  const int n = 20 + static_cast<int>(rng() % 30);
  std::vector<bool> will_cancel(n);
  // Flipped after Submit: the check must happen at launch, not at Submit.
  std::vector<std::atomic<bool>> cancel_now(n);
  std::vector<std::atomic<int>> ran(n), rejected(n);
  std::vector<double> waited(n, -1);
  absl::Mutex mu;
  std::vector<absl::StatusCode> codes(n, absl::StatusCode::kOk);
  int64_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    will_cancel[i] = rng() % 2 == 0;
    Job job;
    job.identity = absl::StrCat("id", rng() % 3);
    job.bytes = 1 + rng() % 100;
    bytes += job.bytes;
    job.cancelled = [&cancel_now, i] { return cancel_now[i].load(); };
    job.run = [&, i](double queue_seconds) {
      waited[i] = queue_seconds;
      ran[i].fetch_add(1);
    };
    job.reject = [&, i](absl::Status why) {
      absl::MutexLock lock(&mu);
      codes[i] = why.code();
      rejected[i].fetch_add(1);
    };
    ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
  }
  EXPECT_EQ(scheduler.stats().queued, n);
  EXPECT_EQ(scheduler.stats().queued_bytes, bytes);
  for (int i = 0; i < n; ++i) {
    if (will_cancel[i]) cancel_now[i].store(true);
  }
  absl::SleepFor(absl::Milliseconds(50));
  blocker.Release();
  scheduler.Drain(absl::Now() + absl::Seconds(60));

  for (int i = 0; i < n; ++i) {
    absl::MutexLock lock(&mu);
    if (will_cancel[i]) {
      EXPECT_EQ(ran[i].load(), 0) << i;
      EXPECT_EQ(rejected[i].load(), 1) << i;
      EXPECT_EQ(codes[i], absl::StatusCode::kCancelled) << i;
    } else {
      EXPECT_EQ(ran[i].load(), 1) << i;
      EXPECT_EQ(rejected[i].load(), 0) << i;
      EXPECT_GE(waited[i], 0.04) << i;  // queued at least the 50 ms block
    }
  }
  EXPECT_EQ(scheduler.stats().queued, 0);
  EXPECT_EQ(scheduler.stats().queued_bytes, 0);
}

TEST(SchedulerTest, FullQueueRefusesAtOnce) {
  std::mt19937 rng(7);
  SchedulerOptions options;
  options.max_in_flight = 1;
  options.max_queue_requests = 5 + rng() % 20;
  options.max_queue_bytes = int64_t{1} << 40;
  Scheduler scheduler("cuda:1", options);
  Blocker blocker(scheduler, 1);

  std::atomic<int> ran{0};
  for (int64_t i = 0; i < options.max_queue_requests; ++i) {
    ASSERT_TRUE(scheduler
                    .Submit(RunOnly(absl::StrCat("id", rng() % 4), rng() % 100,
                                    [&](double) { ran.fetch_add(1); }))
                    .ok());
  }
  std::atomic<int> refused_calls{0};
  Job extra;
  extra.identity = "someone_else";
  extra.run = [&](double) { refused_calls.fetch_add(1); };
  extra.reject = [&](absl::Status) { refused_calls.fetch_add(1); };
  const absl::Time start = absl::Now();
  const absl::Status full = scheduler.Submit(std::move(extra));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(full.message(), HasSubstr("--max_queue_requests"));
  EXPECT_THAT(full.message(), HasSubstr("queue of cuda:1 is full"));
  EXPECT_THAT(full.message(),
              HasSubstr(absl::StrCat(options.max_queue_requests)));

  blocker.Release();
  scheduler.Drain(absl::Now() + absl::Seconds(60));
  EXPECT_EQ(ran.load(), options.max_queue_requests);
  EXPECT_EQ(refused_calls.load(), 0);  // an error from Submit: no callback
}

// Job::seconds count from Submit until the job ends, run or rejected.
TEST(SchedulerTest, OutstandingSecondsCoverWaitingAndRunningJobs) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  Scheduler scheduler("cpu:0", options);
  Blocker blocker(scheduler, 1);
  EXPECT_EQ(scheduler.stats().outstanding_seconds, 0);
  absl::Notification release;
  absl::Notification running;
  Job slow = RunOnly("a", 1, [&](double) {
    running.Notify();
    release.WaitForNotification();
  });
  slow.seconds = 2.5;
  ASSERT_TRUE(scheduler.Submit(std::move(slow)).ok());
  Job quick = RunOnly("b", 1, [](double) {});
  quick.seconds = 0.5;
  ASSERT_TRUE(scheduler.Submit(std::move(quick)).ok());
  EXPECT_DOUBLE_EQ(scheduler.stats().outstanding_seconds, 3.0);
  blocker.Release();
  running.WaitForNotification();
  // The slow job runs; the quick one waits behind it (one worker).
  EXPECT_DOUBLE_EQ(scheduler.stats().outstanding_seconds, 3.0);
  release.Notify();
  scheduler.Drain(absl::Now() + absl::Seconds(60));
  EXPECT_EQ(scheduler.stats().outstanding_seconds, 0);

  Scheduler draining("cpu:1", options);
  Blocker busy(draining, 1);
  Job rejected;
  rejected.identity = "c";
  rejected.seconds = 4;
  rejected.run = [](double) { ADD_FAILURE() << "ran"; };
  rejected.reject = [](absl::Status) {};
  ASSERT_TRUE(draining.Submit(std::move(rejected)).ok());
  EXPECT_DOUBLE_EQ(draining.stats().outstanding_seconds, 4);
  std::thread drain([&] { draining.Drain(absl::Now()); });
  absl::SleepFor(absl::Milliseconds(50));
  busy.Release();
  drain.join();
  EXPECT_EQ(draining.stats().outstanding_seconds, 0);
}

TEST(SchedulerTest, FullQueueByBytesAndOversizedJobWhenNothingWaits) {
  std::mt19937 rng(11);
  SchedulerOptions options;
  options.max_in_flight = 1;
  options.max_queue_requests = 1000;
  options.max_queue_bytes = 1000 + rng() % 1000;
  Scheduler scheduler("cuda:2", options);
  Blocker blocker(scheduler, 1);
  std::atomic<int> ran{0};
  auto count = [&](double) { ran.fetch_add(1); };

  // Larger than the whole limit, but nothing waits: admitted.
  const int64_t huge = options.max_queue_bytes * 3 + rng() % 100;
  ASSERT_TRUE(scheduler.Submit(RunOnly("big", huge, count)).ok());
  EXPECT_EQ(scheduler.stats().queued_bytes, huge);
  // Now something waits: even one byte is past the limit.
  absl::Status status = scheduler.Submit(RunOnly("small", 1, count));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("--max_queue_bytes"));
  // The waiting bytes are past the limit already: even nothing more is
  // refused until the oversized job has left the queue.
  status = scheduler.Submit(RunOnly("small", 0, count));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  blocker.Release();
  while (scheduler.stats().queued > 0) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(scheduler.stats().queued_bytes, 0);

  // Block again and fill by bytes up to exactly the limit.
  Blocker blocker2(scheduler, 1);
  int64_t left = options.max_queue_bytes;
  int admitted = 0;
  while (left > 0) {
    const int64_t b = std::min<int64_t>(left, 1 + rng() % 300);
    ASSERT_TRUE(
        scheduler.Submit(RunOnly(absl::StrCat("id", rng() % 3), b, count))
            .ok());
    left -= b;
    ++admitted;
  }
  EXPECT_EQ(scheduler.stats().queued_bytes, options.max_queue_bytes);
  const absl::Time start = absl::Now();
  status = scheduler.Submit(RunOnly("id0", 1 + rng() % 50, count));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("--max_queue_bytes"));
  EXPECT_THAT(status.message(), HasSubstr("queue of cuda:2 is full"));
  EXPECT_EQ(scheduler.stats().queued, admitted);

  blocker2.Release();
  scheduler.Drain(absl::Now() + absl::Seconds(60));
  EXPECT_EQ(ran.load(), 1 + admitted);
}

TEST(SchedulerTest, InvalidJobs) {
  Scheduler scheduler("cpu:0", SchedulerOptions{});
  Job no_run;
  no_run.reject = [](absl::Status) {};
  EXPECT_EQ(scheduler.Submit(std::move(no_run)).code(),
            absl::StatusCode::kInvalidArgument);
  Job no_reject;
  no_reject.run = [](double) {};
  EXPECT_EQ(scheduler.Submit(std::move(no_reject)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler.Submit(RunOnly("a", -5, [](double) {})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler.stats().queued, 0);
}

TEST(SchedulerTest, RoundRobinOverIdentities) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  Scheduler scheduler("cuda:0", options);
  Blocker blocker(scheduler, 1);

  absl::Mutex mu;
  std::vector<std::string> order;
  auto record = [&](std::string tag) {
    return [&mu, &order, tag](double) {
      absl::MutexLock lock(&mu);
      order.push_back(tag);
    };
  };
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(
        scheduler.Submit(RunOnly("A", 10, record(absl::StrCat("A", i)))).ok());
  }
  ASSERT_TRUE(scheduler.Submit(RunOnly("B", 10, record("B"))).ok());
  ASSERT_TRUE(scheduler.Submit(RunOnly("C", 10, record("C"))).ok());
  EXPECT_EQ(scheduler.stats().identities_waiting, 3);
  blocker.Release();
  scheduler.Drain(absl::Now() + absl::Seconds(60));

  absl::MutexLock lock(&mu);
  ASSERT_EQ(order.size(), 102u);
  std::vector<std::string> a_order;
  int b_at = -1, c_at = -1;
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    if (order[i] == "B") b_at = i;
    if (order[i] == "C") c_at = i;
    if (order[i][0] == 'A') a_order.push_back(order[i]);
  }
  EXPECT_GE(b_at, 0);
  EXPECT_LT(b_at, 3);
  EXPECT_GE(c_at, 0);
  EXPECT_LT(c_at, 3);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a_order[i], absl::StrCat("A", i));
}

TEST(SchedulerTest, RoundRobinManyIdentitiesRandomCounts) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  Scheduler scheduler("cuda:0", options);
  Blocker blocker(scheduler, 1);

  std::mt19937 rng(5);
  const int identities = 3 + rng() % 5;
  std::vector<int> counts(identities);
  absl::Mutex mu;
  std::vector<std::pair<int, int>> order;  // (identity, index within it)
  // Submissions interleaved at random across identities.
  std::vector<int> pending;
  for (int id = 0; id < identities; ++id) {
    counts[id] = 1 + rng() % 30;
    for (int k = 0; k < counts[id]; ++k) pending.push_back(id);
  }
  std::shuffle(pending.begin(), pending.end(), rng);
  std::vector<int> next_index(identities, 0);
  for (int id : pending) {
    const int k = next_index[id]++;
    ASSERT_TRUE(scheduler
                    .Submit(RunOnly(absl::StrCat("id", id), 1,
                                    [&mu, &order, id, k](double) {
                                      absl::MutexLock lock(&mu);
                                      order.emplace_back(id, k);
                                    }))
                    .ok());
  }
  blocker.Release();
  scheduler.Drain(absl::Now() + absl::Seconds(60));

  absl::MutexLock lock(&mu);
  ASSERT_EQ(order.size(), pending.size());
  // FIFO within an identity; between two starts of one identity, every
  // other identity that still had jobs waiting starts at most once.
  std::vector<int> done(identities, 0);
  std::vector<int> last_at(identities, -1);
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    const int id = order[i].first;
    EXPECT_EQ(order[i].second, done[id]);
    ++done[id];
    if (last_at[id] >= 0) {
      std::vector<int> others(identities, 0);
      for (int j = last_at[id] + 1; j < i; ++j) ++others[order[j].first];
      for (int o = 0; o < identities; ++o) EXPECT_LE(others[o], 1) << o;
    }
    last_at[id] = i;
  }
}

TEST(SchedulerTest, RunMaySubmitMoreJobs) {
  SchedulerOptions options;
  options.max_in_flight = 2;
  Scheduler scheduler("cpu:0", options);
  std::mt19937 rng(3);
  const int depth = 10 + rng() % 20;
  std::atomic<int> ran{0};
  absl::Notification done;
  // Each job submits the next from inside run.
  std::function<void(int)> chain = [&](int left) {
    ASSERT_TRUE(scheduler
                    .Submit(RunOnly("chain", 1,
                                    [&, left](double) {
                                      ran.fetch_add(1);
                                      if (left > 1) {
                                        chain(left - 1);
                                      } else {
                                        done.Notify();
                                      }
                                    }))
                    .ok());
  };
  chain(depth);
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  scheduler.Drain(absl::Now() + absl::Seconds(60));
  EXPECT_EQ(ran.load(), depth);
}

TEST(SchedulerTest, DrainRejectsWaitingAtDeadlineAndWaitsForRunning) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  Scheduler scheduler("cuda:0", options);
  absl::Notification started;
  std::atomic<bool> finished{false};
  ASSERT_TRUE(scheduler
                  .Submit(RunOnly("slow", 1,
                                  [&](double) {
                                    started.Notify();
                                    absl::SleepFor(absl::Milliseconds(500));
                                    finished.store(true);
                                  }))
                  .ok());
  started.WaitForNotification();

  std::mt19937 rng(9);
  const int n = 5 + rng() % 20;
  absl::Mutex mu;
  std::vector<absl::Status> why(n, absl::OkStatus());
  std::vector<absl::Time> when(n);
  std::atomic<int> ran{0};
  for (int i = 0; i < n; ++i) {
    Job job;
    job.identity = absl::StrCat("id", rng() % 3);
    job.bytes = rng() % 100;
    job.run = [&](double) { ran.fetch_add(1); };
    job.reject = [&, i](absl::Status status) {
      absl::MutexLock lock(&mu);
      why[i] = status;
      when[i] = absl::Now();
    };
    ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
  }

  const absl::Time deadline = absl::Now() + absl::Milliseconds(200);
  scheduler.Drain(deadline);
  EXPECT_TRUE(finished.load());  // Drain returned after the running job
  EXPECT_EQ(ran.load(), 0);
  {
    absl::MutexLock lock(&mu);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(why[i].code(), absl::StatusCode::kCancelled) << why[i];
      EXPECT_THAT(why[i].message(), HasSubstr("shutting down"));
      // Not at Drain's start: at its deadline (bound loose for slow clocks).
      EXPECT_GE(when[i], deadline - absl::Milliseconds(50)) << i;
    }
  }
  const absl::Status after = scheduler.Submit(
      RunOnly("late", 1, [](double) { ADD_FAILURE() << "ran after Drain"; }));
  EXPECT_EQ(after.code(), absl::StatusCode::kUnavailable) << after;
  EXPECT_THAT(after.message(), HasSubstr("shutting down"));
  const Scheduler::Stats stats = scheduler.stats();
  EXPECT_EQ(stats.queued, 0);
  EXPECT_EQ(stats.queued_bytes, 0);
  EXPECT_EQ(stats.in_flight, 0);
  EXPECT_EQ(stats.identities_waiting, 0);
  scheduler.Drain(absl::Now());  // idempotent
}

TEST(SchedulerTest, DrainWithGenerousDeadlineRunsEverything) {
  SchedulerOptions options;
  options.max_in_flight = 2;
  Scheduler scheduler("cuda:0", options);
  Blocker blocker(scheduler, 2);
  std::mt19937 rng(21);
  const int n = 50 + rng() % 100;
  std::vector<std::atomic<int>> ran(n);
  for (int i = 0; i < n; ++i) {
    const int sleep_us = rng() % 500;
    ASSERT_TRUE(scheduler
                    .Submit(RunOnly(absl::StrCat("id", rng() % 4), rng() % 100,
                                    [&ran, i, sleep_us](double) {
                                      absl::SleepFor(
                                          absl::Microseconds(sleep_us));
                                      ran[i].fetch_add(1);
                                    }))
                    .ok());
  }
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(20));
    blocker.Release();
  });
  // Two concurrent Drains: both return once everything has run.
  std::thread other([&] { scheduler.Drain(absl::Now() + absl::Seconds(60)); });
  scheduler.Drain(absl::Now() + absl::Seconds(60));
  for (int i = 0; i < n; ++i) EXPECT_EQ(ran[i].load(), 1) << i;
  other.join();
  releaser.join();
  for (int i = 0; i < n; ++i) EXPECT_EQ(ran[i].load(), 1) << i;
}

TEST(SchedulerTest, DestructorRejectsWaitingJobs) {
  std::mt19937 rng(17);
  const int n = 10 + rng() % 40;
  std::atomic<int> ran{0}, rejected{0}, not_cancelled{0};
  {
    // Outlives the Scheduler, so that only a reject releases the worker:
    // the Scheduler's destructor must reject the waiting jobs first.
    std::unique_ptr<Blocker> blocker;
    SchedulerOptions options;
    options.max_in_flight = 1;
    Scheduler scheduler("cuda:0", options);
    blocker = std::make_unique<Blocker>(scheduler, 1);
    for (int i = 0; i < n; ++i) {
      Job job;
      job.identity = absl::StrCat("id", rng() % 5);
      job.bytes = rng() % 1000;
      job.run = [&](double) { ran.fetch_add(1); };
      // The first reject frees the blocked worker: by then every waiting
      // job has been taken from the queue, so none may run.
      job.reject = [&](absl::Status why) {
        if (why.code() != absl::StatusCode::kCancelled) {
          not_cancelled.fetch_add(1);
        }
        if (rejected.fetch_add(1) == 0) blocker->Release();
      };
      ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
    }
  }
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(rejected.load(), n);
  EXPECT_EQ(not_cancelled.load(), 0);
}

TEST(SchedulerTest, DestructorNeverLosesAJob) {
  std::mt19937 rng(23);
  for (int round = 0; round < 20; ++round) {
    const int n = 1 + rng() % 200;
    std::vector<std::atomic<int>> calls(n);
    {
      SchedulerOptions options;
      options.max_in_flight = 1 + rng() % 4;
      Scheduler scheduler("cpu:0", options);
      for (int i = 0; i < n; ++i) {
        Job job;
        job.identity = absl::StrCat("id", rng() % 3);
        const int sleep_us = rng() % 50;
        job.run = [&calls, i, sleep_us](double) {
          absl::SleepFor(absl::Microseconds(sleep_us));
          calls[i].fetch_add(1);
        };
        job.reject = [&calls, i](absl::Status) { calls[i].fetch_add(1); };
        ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
      }
    }
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(calls[i].load(), 1) << "round " << round << " job " << i;
    }
  }
}

// Records the batches a scheduler starts: each entry is the tags of one
// start, in the order the scheduler gave them.
struct BatchLog {
  absl::Mutex mu;
  std::vector<std::vector<int>> starts ABSL_GUARDED_BY(mu);
  std::vector<int> rejected ABSL_GUARDED_BY(mu);
};

// A batchable job tagged `tag` (its batch_item points at the tag).
Job Batchable(std::string identity, std::string key, int tag,
              int64_t batch_bytes, BatchLog* log) {
  Job job;
  job.identity = std::move(identity);
  job.batch_key = std::move(key);
  job.batch_bytes = batch_bytes;
  job.batch_item = std::make_shared<int>(tag);
  job.run = [log, tag](double) {
    absl::MutexLock lock(&log->mu);
    log->starts.push_back({tag});
  };
  job.run_batch = [log](std::vector<Job> batch, std::vector<double> queued) {
    EXPECT_EQ(batch.size(), queued.size());
    std::vector<int> tags;
    for (const Job& j : batch) {
      tags.push_back(*std::static_pointer_cast<int>(j.batch_item));
    }
    absl::MutexLock lock(&log->mu);
    log->starts.push_back(std::move(tags));
  };
  job.reject = [log, tag](absl::Status) {
    absl::MutexLock lock(&log->mu);
    log->rejected.push_back(tag);
  };
  return job;
}

TEST(SchedulerBatchTest, WaitingJobsOfOneKeyStartTogetherUpToTheLimits) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  options.batch_max_requests = 3;
  options.batch_max_bytes = 1000;
  BatchLog log;
  {
    Scheduler scheduler("cpu:0", options);
    {
      Blocker blocker(scheduler, 1);
      // a: 0..6 (each 100 bytes), then b: 7..8; c: 9 is too big to join.
      for (int i = 0; i < 7; ++i) {
        ASSERT_TRUE(scheduler.Submit(Batchable("x", "a", i, 100, &log)).ok());
      }
      ASSERT_TRUE(scheduler.Submit(Batchable("x", "b", 7, 100, &log)).ok());
      ASSERT_TRUE(scheduler.Submit(Batchable("x", "b", 8, 950, &log)).ok());
    }
    scheduler.Drain(absl::Now() + absl::Seconds(10));
  }
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.starts,
              ::testing::ElementsAre(
                  ::testing::ElementsAre(0, 1, 2),
                  ::testing::ElementsAre(3, 4, 5), ::testing::ElementsAre(6),
                  ::testing::ElementsAre(7), ::testing::ElementsAre(8)));
  EXPECT_TRUE(log.rejected.empty());
}

// A running batch takes one worker, not one slot per job in it: another
// worker starts a job meanwhile. (Counting the batch's jobs against
// max_in_flight made batches run one at a time, grow to their limits and
// halve a GPU server's rate of batched 64 KiB transposes.)
TEST(SchedulerBatchTest, ARunningBatchHoldsOneSlot) {
  SchedulerOptions options;
  options.max_in_flight = 2;
  options.batch_max_requests = 8;
  absl::Notification batch_started, release_batch, other_ran;
  {
    Scheduler scheduler("cpu:0", options);
    {
      Blocker blocker(scheduler, 2);
      for (int i = 0; i < 3; ++i) {
        Job job = RunOnly(
            "x", 0, [](double) { ADD_FAILURE() << "a batched job ran alone"; });
        job.batch_key = "k";
        job.run_batch = [&](std::vector<Job> batch, std::vector<double>) {
          EXPECT_EQ(batch.size(), 3u);
          batch_started.Notify();
          EXPECT_TRUE(
              release_batch.WaitForNotificationWithTimeout(absl::Minutes(1)));
        };
        ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
      }
    }
    ASSERT_TRUE(batch_started.WaitForNotificationWithTimeout(absl::Minutes(1)));
    ASSERT_TRUE(
        scheduler.Submit(RunOnly("y", 0, [&](double) { other_ran.Notify(); }))
            .ok());
    EXPECT_TRUE(other_ran.WaitForNotificationWithTimeout(absl::Seconds(30)))
        << "the second worker waited for the batch";
    release_batch.Notify();
    scheduler.Drain(absl::Now() + absl::Seconds(10));
  }
}

TEST(SchedulerBatchTest, BatchesKeepFairnessAndEachIdentitysOrder) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  options.batch_max_requests = 4;
  BatchLog log;
  {
    Scheduler scheduler("cpu:0", options);
    {
      Blocker blocker(scheduler, 1);
      // heavy floods the queue first; light's two jobs arrive last.
      for (int i = 0; i < 6; ++i) {
        ASSERT_TRUE(scheduler.Submit(Batchable("heavy", "k", i, 1, &log)).ok());
      }
      ASSERT_TRUE(scheduler.Submit(Batchable("light", "k", 100, 1, &log)).ok());
      ASSERT_TRUE(scheduler.Submit(Batchable("light", "k", 101, 1, &log)).ok());
    }
    scheduler.Drain(absl::Now() + absl::Seconds(10));
  }
  absl::MutexLock lock(&log.mu);
  // One job per identity per sweep: light gets into the first batch.
  EXPECT_THAT(log.starts,
              ::testing::ElementsAre(::testing::ElementsAre(0, 100, 1, 101),
                                     ::testing::ElementsAre(2, 3, 4, 5)));
}

TEST(SchedulerBatchTest, AJobBehindAnotherKeyWaitsForItsTurn) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  BatchLog log;
  {
    Scheduler scheduler("cpu:0", options);
    {
      Blocker blocker(scheduler, 1);
      ASSERT_TRUE(scheduler.Submit(Batchable("x", "a", 0, 1, &log)).ok());
      ASSERT_TRUE(scheduler.Submit(Batchable("x", "b", 1, 1, &log)).ok());
      ASSERT_TRUE(scheduler.Submit(Batchable("x", "a", 2, 1, &log)).ok());
      ASSERT_TRUE(scheduler.Submit(Batchable("y", "a", 3, 1, &log)).ok());
    }
    scheduler.Drain(absl::Now() + absl::Seconds(10));
  }
  absl::MutexLock lock(&log.mu);
  // x's job 2 may not pass x's job 1 of another key.
  EXPECT_THAT(log.starts, ::testing::ElementsAre(::testing::ElementsAre(0, 3),
                                                 ::testing::ElementsAre(1),
                                                 ::testing::ElementsAre(2)));
}

TEST(SchedulerBatchTest, CancelledJobsLeaveTheBatchRejected) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  BatchLog log;
  {
    Scheduler scheduler("cpu:0", options);
    {
      Blocker blocker(scheduler, 1);
      for (int i = 0; i < 4; ++i) {
        Job job = Batchable("x", "k", i, 1, &log);
        if (i % 2 == 0) job.cancelled = [] { return true; };
        ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
      }
    }
    scheduler.Drain(absl::Now() + absl::Seconds(10));
  }
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.starts, ::testing::ElementsAre(::testing::ElementsAre(1, 3)));
  EXPECT_THAT(log.rejected, ::testing::ElementsAre(0, 2));
}

TEST(SchedulerBatchTest, WithoutADelayALoneJobStartsAlone) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  BatchLog log;
  Scheduler scheduler("cpu:0", options);
  ASSERT_TRUE(scheduler.Submit(Batchable("x", "k", 0, 1, &log)).ok());
  scheduler.Drain(absl::Now() + absl::Seconds(10));
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.starts, ::testing::ElementsAre(::testing::ElementsAre(0)));
}

TEST(SchedulerBatchTest, ADelayGathersJobsThatArriveWithinIt) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  options.batch_max_requests = 3;
  options.batch_max_delay = absl::Seconds(30);  // ended by the third job
  BatchLog log;
  Scheduler scheduler("cpu:0", options);
  const absl::Time start = absl::Now();
  for (int i = 0; i < 3; ++i) {
    Job job = Batchable("x", "k", i, 1, &log);
    // Even a job that may run directly waits to batch.
    job.may_run_directly = true;
    ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
    absl::SleepFor(absl::Milliseconds(20));
  }
  scheduler.Drain(absl::Now() + absl::Seconds(60));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.starts,
              ::testing::ElementsAre(::testing::ElementsAre(0, 1, 2)));
}

TEST(SchedulerBatchTest, WhileABatchFillsOtherWorkersLeaveArrivalsToIt) {
  SchedulerOptions options;
  options.max_in_flight = 4;
  options.batch_max_requests = 6;
  options.batch_max_delay = absl::Seconds(30);  // ended by the sixth job
  BatchLog log;
  Scheduler scheduler("cpu:0", options);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(scheduler.Submit(Batchable("x", "k", i, 1, &log)).ok());
    absl::SleepFor(absl::Milliseconds(5));
  }
  scheduler.Drain(absl::Now() + absl::Seconds(60));
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.starts,
              ::testing::ElementsAre(::testing::ElementsAre(0, 1, 2, 3, 4, 5)));
}

TEST(SchedulerBatchTest, BatchingOffStartsEachJobAlone) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  options.batch_max_requests = 1;
  BatchLog log;
  {
    Scheduler scheduler("cpu:0", options);
    {
      Blocker blocker(scheduler, 1);
      for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(scheduler.Submit(Batchable("x", "k", i, 1, &log)).ok());
      }
    }
    scheduler.Drain(absl::Now() + absl::Seconds(10));
  }
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.starts, ::testing::ElementsAre(::testing::ElementsAre(0),
                                                 ::testing::ElementsAre(1),
                                                 ::testing::ElementsAre(2)));
}

TEST(SchedulerBatchTest, AKeyWithoutRunBatchIsRefused) {
  Scheduler scheduler("cpu:0", SchedulerOptions{});
  Job job = RunOnly("x", 0, [](double) {});
  job.batch_key = "k";
  EXPECT_EQ(scheduler.Submit(std::move(job)).code(),
            absl::StatusCode::kInvalidArgument);
}

// A job that may run on its submitter's thread; notes where it ran.
Job Direct(
    std::string identity, std::atomic<std::thread::id>* ran_on,
    std::function<void()> body = [] {}) {
  Job job = RunOnly(std::move(identity), 1, [ran_on, body](double) {
    ran_on->store(std::this_thread::get_id());
    body();
  });
  job.may_run_directly = true;
  return job;
}

TEST(SchedulerDirectTest, AnIdleSchedulerRunsItBeforeSubmitReturns) {
  Scheduler scheduler("cpu:0", SchedulerOptions{});
  std::atomic<std::thread::id> ran_on{};
  ASSERT_TRUE(scheduler.Submit(Direct("x", &ran_on)).ok());
  EXPECT_EQ(ran_on.load(), std::this_thread::get_id());
  const Scheduler::Stats stats = scheduler.stats();
  EXPECT_EQ(stats.in_flight, 0);
  EXPECT_EQ(stats.outstanding_seconds, 0);
  EXPECT_EQ(stats.direct_runs, 1);
}

// A job that may run directly and could batch: run_batch, never called for
// a batch of one, fails the test if it is.
Job BatchableDirect(std::string identity,
                    std::atomic<std::thread::id>* ran_on) {
  Job job = Direct(std::move(identity), ran_on);
  job.batch_key = "k";
  job.run_batch = [](std::vector<Job>, std::vector<double>) {
    ADD_FAILURE() << "a lone job ran as a batch";
  };
  return job;
}

// Under load requests come back to back: one that could batch and arrives
// within direct_run_min_idle of the last start's end goes to a worker,
// which would batch it with the ones behind it.
TEST(SchedulerDirectTest, RightAfterAnEndABatchableJobGoesToAWorker) {
  SchedulerOptions options;
  options.direct_run_min_idle = absl::Hours(1);
  Scheduler scheduler("cpu:0", options);
  std::atomic<std::thread::id> first{}, second{};
  // The scheduler counts as idle since long before it began.
  ASSERT_TRUE(scheduler.Submit(BatchableDirect("x", &first)).ok());
  EXPECT_EQ(first.load(), std::this_thread::get_id());
  ASSERT_TRUE(scheduler.Submit(BatchableDirect("x", &second)).ok());
  scheduler.Drain(absl::Now() + absl::Seconds(10));
  EXPECT_NE(second.load(), std::thread::id());
  EXPECT_NE(second.load(), std::this_thread::get_id());
  EXPECT_EQ(scheduler.stats().direct_runs, 1);
}

// Submits three jobs one after another, made by make; each must run on
// this thread before Submit returns.
void ExpectEachRunsDirectly(
    absl::Duration min_idle,
    const std::function<Job(std::atomic<std::thread::id>*)>& make) {
  SchedulerOptions options;
  options.direct_run_min_idle = min_idle;
  Scheduler scheduler("cpu:0", options);
  for (int i = 0; i < 3; ++i) {
    std::atomic<std::thread::id> ran_on{};
    ASSERT_TRUE(scheduler.Submit(make(&ran_on)).ok());
    EXPECT_EQ(ran_on.load(), std::this_thread::get_id()) << i;
  }
  EXPECT_EQ(scheduler.stats().direct_runs, 3);
}

TEST(SchedulerDirectTest, RightAfterAnEndAJobWithoutBatchKeyRunsDirectly) {
  ExpectEachRunsDirectly(absl::Hours(1),
                         [](auto* ran_on) { return Direct("x", ran_on); });
}

TEST(SchedulerDirectTest, WithNoMinimumIdleTimeBatchableJobsRunDirectly) {
  ExpectEachRunsDirectly(absl::ZeroDuration(), [](auto* ran_on) {
    return BatchableDirect("x", ran_on);
  });
}

// Submits n jobs that may run directly, each after the one before has
// ended (so the scheduler is idle at every submission), pausing `pause`
// between them; returns how many ran on this thread.
int DirectRunsOfSpacedJobs(double max_rate, int n, absl::Duration pause) {
  SchedulerOptions options;
  options.direct_run_max_rate = max_rate;
  Scheduler scheduler("cpu:0", options);
  int here = 0;
  for (int i = 0; i < n; ++i) {
    std::atomic<std::thread::id> ran_on{};
    absl::Notification done;
    EXPECT_TRUE(
        scheduler.Submit(Direct("x", &ran_on, [&done] { done.Notify(); }))
            .ok());
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10))) << i;
    if (ran_on.load() == std::this_thread::get_id()) ++here;
    absl::SleepFor(pause);
  }
  scheduler.Drain(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(scheduler.stats().direct_runs, here);
  return here;
}

// Submissions back to back (a worker's wake-up apart, well under the 5 ms
// that 200 a second allow): after the first few, the mean gap falls below
// the limit and the jobs go to the workers.
TEST(SchedulerDirectTest, AboveTheMaximumRateJobsGoToTheWorkers) {
  const int here = DirectRunsOfSpacedJobs(200, 1000, absl::ZeroDuration());
  EXPECT_GE(here, 1);
  EXPECT_LT(here, 500);
}

TEST(SchedulerDirectTest, BelowTheMaximumRateEveryJobRunsDirectly) {
  EXPECT_EQ(DirectRunsOfSpacedJobs(200, 10, absl::Milliseconds(12)), 10);
}

TEST(SchedulerDirectTest, WithoutAMaximumRateBackToBackJobsRunDirectly) {
  EXPECT_EQ(DirectRunsOfSpacedJobs(0, 1000, absl::ZeroDuration()), 1000);
}

TEST(SchedulerDirectTest, WithoutTheFlagAJobGoesToAWorker) {
  Scheduler scheduler("cpu:0", SchedulerOptions{});
  std::atomic<std::thread::id> ran_on{};
  Job job = Direct("x", &ran_on);
  job.may_run_directly = false;
  ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
  scheduler.Drain(absl::Now() + absl::Seconds(10));
  EXPECT_NE(ran_on.load(), std::thread::id());
  EXPECT_NE(ran_on.load(), std::this_thread::get_id());
  EXPECT_EQ(scheduler.stats().direct_runs, 0);
}

TEST(SchedulerDirectTest, WhileAJobRunsItGoesToAWorker) {
  SchedulerOptions options;
  options.max_in_flight = 2;
  Scheduler scheduler("cpu:0", options);
  std::atomic<std::thread::id> ran_on{};
  absl::Notification ran;
  {
    Blocker blocker(scheduler, 1);  // one slot of two is free
    ASSERT_TRUE(
        scheduler.Submit(Direct("x", &ran_on, [&ran] { ran.Notify(); })).ok());
    ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }
  EXPECT_NE(ran_on.load(), std::this_thread::get_id());
}

TEST(SchedulerDirectTest, WhileEverySlotIsTakenItQueuesInTurn) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  std::vector<std::string> order;
  absl::Mutex mu;
  const auto note = [&](std::string what) {
    return [&, what](double) {
      absl::MutexLock lock(&mu);
      order.push_back(what);
    };
  };
  {
    Scheduler scheduler("cpu:0", options);
    {
      Blocker blocker(scheduler, 1);
      ASSERT_TRUE(scheduler.Submit(RunOnly("a", 1, note("waiting"))).ok());
      // No slot is free: Submit queues the job behind "waiting" and
      // returns.
      Job direct = RunOnly("b", 1, note("direct"));
      direct.may_run_directly = true;
      ASSERT_TRUE(scheduler.Submit(std::move(direct)).ok());
      absl::MutexLock lock(&mu);
      EXPECT_TRUE(order.empty());
    }
    scheduler.Drain(absl::Now() + absl::Seconds(10));
  }
  EXPECT_THAT(order, ::testing::ElementsAre("waiting", "direct"));
}

TEST(SchedulerDirectTest, DirectRunsHoldSlots) {
  SchedulerOptions options;
  options.max_in_flight = 1;
  Scheduler scheduler("cpu:0", options);
  absl::Notification direct_started, release;
  std::atomic<bool> direct_done{false};
  std::atomic<std::thread::id> ran_on{};
  std::thread submitter([&] {
    EXPECT_TRUE(scheduler
                    .Submit(Direct("x", &ran_on,
                                   [&] {
                                     direct_started.Notify();
                                     release.WaitForNotification();
                                     direct_done.store(true);
                                   }))
                    .ok());
  });
  direct_started.WaitForNotification();
  EXPECT_EQ(scheduler.stats().in_flight, 1);
  // The one slot is the direct run's: a queued job waits for it.
  std::atomic<bool> queued_saw_done{false};
  std::atomic<bool> queued_ran{false};
  ASSERT_TRUE(scheduler
                  .Submit(RunOnly("y", 1,
                                  [&](double) {
                                    queued_saw_done.store(direct_done.load());
                                    queued_ran.store(true);
                                  }))
                  .ok());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(queued_ran.load());
  release.Notify();
  submitter.join();
  scheduler.Drain(absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(queued_ran.load());
  EXPECT_TRUE(queued_saw_done.load());
}

TEST(SchedulerDirectTest, ACancelledJobIsRejectedNotRun) {
  Scheduler scheduler("cpu:0", SchedulerOptions{});
  Job job;
  job.identity = "x";
  job.may_run_directly = true;
  job.cancelled = [] { return true; };
  job.run = [](double) { ADD_FAILURE() << "a cancelled job ran"; };
  absl::Status why;
  job.reject = [&why](absl::Status status) { why = status; };
  ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
  EXPECT_EQ(why.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(why.message(), HasSubstr("cancelled before it started"));
}

TEST(SchedulerDirectTest, DrainWaitsForDirectRuns) {
  Scheduler scheduler("cpu:0", SchedulerOptions{});
  absl::Notification started;
  std::atomic<bool> done{false};
  std::atomic<std::thread::id> ran_on{};
  std::thread submitter([&] {
    EXPECT_TRUE(scheduler
                    .Submit(Direct("x", &ran_on,
                                   [&] {
                                     started.Notify();
                                     absl::SleepFor(absl::Milliseconds(100));
                                     done.store(true);
                                   }))
                    .ok());
  });
  started.WaitForNotification();
  scheduler.Drain(absl::Now());
  EXPECT_TRUE(done.load());
  submitter.join();
  EXPECT_EQ(scheduler.Submit(Direct("x", &ran_on)).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace coalesce
