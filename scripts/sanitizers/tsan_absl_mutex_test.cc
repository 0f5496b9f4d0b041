// Checks tsan_absl_mutex.cc in the COALESCE_SANITIZE=thread build: threads
// share data under every kind of absl::Mutex acquire and wait that file
// annotates, which TSan must pass without a report; with --race, two of
// them also touch one counter without the lock, after their locked work,
// which TSan must still report (the annotations hide no race).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

struct Shared {
  absl::Mutex mu;
  absl::CondVar cv;
  int guarded = 0;
  bool ready = false;
  bool signalled = false;
  int unguarded = 0;
};

// Lock, ReaderLock, TryLock and ReaderTryLock around `rounds` updates.
void Locks(Shared& s, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    {
      absl::MutexLock lock(&s.mu);
      ++s.guarded;
    }
    {
      absl::ReaderMutexLock lock(&s.mu);
      if (s.guarded < 0) std::abort();
    }
    if (s.mu.TryLock()) {
      ++s.guarded;
      s.mu.Unlock();
    }
    if (s.mu.ReaderTryLock()) {
      if (s.guarded < 0) std::abort();
      s.mu.ReaderUnlock();
    }
  }
  absl::MutexLock lock(&s.mu);
  s.ready = true;
}

// Every wait: each returns holding the lock, in the mode it was taken in.
void Waits(Shared& s) {
  {
    absl::MutexLock lock(&s.mu);
    s.mu.Await(absl::Condition(&s.ready));
    ++s.guarded;
  }
  {
    absl::ReaderMutexLock lock(&s.mu);
    while (!s.mu.AwaitWithTimeout(absl::Condition(&s.ready),
                                  absl::Milliseconds(1))) {
    }
    if (s.guarded < 0) std::abort();
  }
  s.mu.LockWhen(absl::Condition(&s.ready));
  ++s.guarded;
  s.mu.Unlock();
  s.mu.ReaderLockWhen(absl::Condition(&s.ready));
  if (s.guarded < 0) std::abort();
  s.mu.ReaderUnlock();
  s.mu.LockWhenWithTimeout(absl::Condition(&s.ready), absl::Seconds(60));
  ++s.guarded;
  s.mu.Unlock();
  absl::MutexLock lock(&s.mu);
  while (!s.signalled) s.cv.WaitWithTimeout(&s.mu, absl::Milliseconds(1));
  ++s.guarded;
}

void Signal(Shared& s) {
  absl::MutexLock lock(&s.mu);
  while (!s.ready) s.cv.Wait(&s.mu);
  s.signalled = true;
  ++s.guarded;
  s.cv.SignalAll();
}

}  // namespace

int main(int argc, char** argv) {
  const bool race = argc > 1 && std::strcmp(argv[1], "--race") == 0;
  std::random_device seed;
  const int rounds = 100 + static_cast<int>(seed() % 100);
  auto shared = std::make_unique<Shared>();
  Shared& s = *shared;
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    Locks(s, rounds);
    if (race) ++s.unguarded;
  });
  threads.emplace_back([&] {
    Waits(s);
    if (race) ++s.unguarded;
  });
  threads.emplace_back([&] { Waits(s); });
  threads.emplace_back([&] { Signal(s); });
  // Wakes the signaller once the lockers are done.
  threads.emplace_back([&] {
    absl::MutexLock lock(&s.mu);
    s.mu.Await(absl::Condition(&s.ready));
    s.cv.SignalAll();
  });
  for (std::thread& t : threads) t.join();
  const int expected = 2 * rounds + 2 * 4 + 1;
  std::printf("guarded %d (at least %d), unguarded %d\n", s.guarded,
              expected - rounds, s.unguarded);
  return s.guarded >= expected - rounds && s.guarded <= expected ? 0 : 1;
}
