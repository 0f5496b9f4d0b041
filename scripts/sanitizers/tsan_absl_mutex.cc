// ThreadSanitizer annotations for the system's absl::Mutex and
// absl::CondVar, linked into every executable of the
// COALESCE_SANITIZE=thread build (top-level CMakeLists.txt).
//
// Debian's Abseil is not built with TSan, so its Mutex takes and releases
// locks where TSan cannot see it, and every access guarded by an
// absl::Mutex would be reported as a race. The definitions below take the
// library's place (an executable's definitions come first in symbol lookup,
// for the calls from gRPC as well), tell TSan of each acquire and release
// the way Abseil's own TSan build does in its mutex.cc, and call the
// library's functions, found with dlsym(RTLD_NEXT). As in that build, TSan
// ignores what happens inside a library call, which covers the conditions
// the library evaluates for a waiter on another thread.
//
// Thread-safety: each function is as thread-safe as the one it wraps; the
// record of reader-held locks is per thread.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#ifndef __SANITIZE_THREAD__
#error "tsan_absl_mutex.cc belongs in the COALESCE_SANITIZE=thread build only"
#endif
static_assert(ABSL_OPTION_USE_INLINE_NAMESPACE == 1,
              "the mangled names below include Abseil's inline namespace");

#define COALESCE_TSAN_STR2(x) #x
#define COALESCE_TSAN_STR(x) COALESCE_TSAN_STR2(x)

namespace {

// The library's definition of absl::<inline namespace>::`nested`, where
// `nested` is the rest of the mangled name (in it, NS0_ stands for
// absl::<inline namespace>). Aborts naming the symbol when it is missing: a
// different Abseil than this file was written for.
template <typename Fn>
Fn Real(const char* nested) {
  const std::string ns = COALESCE_TSAN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = "_ZN4absl" + std::to_string(ns.size()) + ns + nested;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// A member function as the library's symbol is called: `this` first.
template <typename Member>
struct Plain;
template <typename R, typename C, typename... A>
struct Plain<R (C::*)(A...)> {
  using type = R (*)(C*, A...);
};

// The library's definition of the member function kMember (defined below,
// in its place), looked up once.
template <auto kMember>
auto Lib(const char* nested) {
  using Fn = typename Plain<decltype(kMember)>::type;
  static const Fn fn = Real<Fn>(nested);
  return fn;
}

// Calls the library's kMember; what it returns, or true where it returns
// nothing.
template <auto kMember, typename... A>
bool Call(const char* nested, A&&... args) {
  const auto fn = Lib<kMember>(nested);
  if constexpr (std::is_void_v<decltype(fn(std::forward<A>(args)...))>) {
    fn(std::forward<A>(args)...);
    return true;
  } else {
    return fn(std::forward<A>(args)...);
  }
}

// Set while this thread is inside one of the library's functions: the
// library calls its own (AwaitWithTimeout calls AwaitWithDeadline, for
// one) through the same symbols, and only the outermost call is annotated.
thread_local bool in_library = false;

class LibraryCall {
 public:
  LibraryCall() : outermost_(!in_library) { in_library = true; }
  ~LibraryCall() {
    if (outermost_) in_library = false;
  }
  bool outermost() const { return outermost_; }

 private:
  const bool outermost_;
};

// Mutexes this thread holds as a reader, so that a wait releases and
// retakes each lock in the mode it is held in. Plain arrays: locks are
// still taken while a thread's thread_local objects are destroyed.
constexpr int kMaxReaderHeld = 64;
thread_local const absl::Mutex* reader_held[kMaxReaderHeld];
thread_local int reader_held_count = 0;

void NoteReader(const absl::Mutex* mu) {
  if (reader_held_count == kMaxReaderHeld) {
    std::fprintf(stderr, "tsan_absl_mutex: over %d reader locks held\n",
                 kMaxReaderHeld);
    std::abort();
  }
  reader_held[reader_held_count++] = mu;
}

const absl::Mutex** FindReader(const absl::Mutex* mu) {
  return std::find(reader_held, reader_held + reader_held_count, mu);
}

void ForgetReader(const absl::Mutex* mu) {
  const absl::Mutex** it = FindReader(mu);
  if (it != reader_held + reader_held_count) {
    *it = reader_held[--reader_held_count];
  }
}

unsigned ModeFlags(const absl::Mutex* mu) {
  return FindReader(mu) != reader_held + reader_held_count
             ? __tsan_mutex_read_lock
             : 0;
}

// Lock, LockWhen and their variants: the call returns with `mu` held (in
// read mode with __tsan_mutex_read_lock), whatever it returns.
template <auto kMember, typename... A>
bool Acquire(absl::Mutex* mu, unsigned flags, const char* nested, A&&... args) {
  LibraryCall library;
  if (!library.outermost()) {
    return Call<kMember>(nested, mu, std::forward<A>(args)...);
  }
  __tsan_mutex_pre_lock(mu, flags);
  const bool result = Call<kMember>(nested, mu, std::forward<A>(args)...);
  __tsan_mutex_post_lock(mu, flags, 0);
  if (flags & __tsan_mutex_read_lock) NoteReader(mu);
  return result;
}

// TryLock and ReaderTryLock: the call returns whether it took `mu`.
template <auto kMember>
bool TryAcquire(absl::Mutex* mu, unsigned flags, const char* nested) {
  LibraryCall library;
  if (!library.outermost()) return Call<kMember>(nested, mu);
  flags |= __tsan_mutex_try_lock;
  __tsan_mutex_pre_lock(mu, flags);
  const bool locked = Call<kMember>(nested, mu);
  __tsan_mutex_post_lock(
      mu, locked ? flags : flags | __tsan_mutex_try_lock_failed, 0);
  if (locked && (flags & __tsan_mutex_read_lock)) NoteReader(mu);
  return locked;
}

template <auto kMember>
void Release(absl::Mutex* mu, unsigned flags, const char* nested) {
  LibraryCall library;
  if (library.outermost()) {
    if (flags & __tsan_mutex_read_lock) ForgetReader(mu);
    __tsan_mutex_pre_unlock(mu, flags);
  }
  Call<kMember>(nested, mu);
  if (library.outermost()) __tsan_mutex_post_unlock(mu, flags);
}

// Mutex::Await* and CondVar::Wait*, called on `self`: the call releases
// `mu` and takes it again, in the mode this thread holds it, before it
// returns.
template <auto kMember, typename Self, typename... A>
bool WaitOn(absl::Mutex* mu, const char* nested, Self* self, A&&... args) {
  LibraryCall library;
  if (!library.outermost()) {
    return Call<kMember>(nested, self, std::forward<A>(args)...);
  }
  const unsigned flags = ModeFlags(mu);
  __tsan_mutex_pre_unlock(mu, flags);
  __tsan_mutex_post_unlock(mu, flags);
  __tsan_mutex_pre_lock(mu, flags);
  const bool result = Call<kMember>(nested, self, std::forward<A>(args)...);
  __tsan_mutex_post_lock(mu, flags, 0);
  return result;
}

constexpr unsigned kRead = __tsan_mutex_read_lock;

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  static const auto real = Real<void (*)(Mutex*)>("5MutexD1Ev");
  real(this);
  __tsan_mutex_destroy(this, __tsan_mutex_not_static);
}

// Each member below calls the library's own, named by the rest of its
// mangled name.
void Mutex::Lock() { Acquire<&Mutex::Lock>(this, 0, "5Mutex4LockEv"); }
void Mutex::ReaderLock() {
  Acquire<&Mutex::ReaderLock>(this, kRead, "5Mutex10ReaderLockEv");
}
bool Mutex::TryLock() {
  return TryAcquire<&Mutex::TryLock>(this, 0, "5Mutex7TryLockEv");
}
bool Mutex::ReaderTryLock() {
  return TryAcquire<&Mutex::ReaderTryLock>(this, kRead,
                                           "5Mutex13ReaderTryLockEv");
}
void Mutex::Unlock() { Release<&Mutex::Unlock>(this, 0, "5Mutex6UnlockEv"); }
void Mutex::ReaderUnlock() {
  Release<&Mutex::ReaderUnlock>(this, kRead, "5Mutex12ReaderUnlockEv");
}

void Mutex::LockWhen(const Condition& c) {
  Acquire<&Mutex::LockWhen>(this, 0, "5Mutex8LockWhenERKNS0_9ConditionE", c);
}
void Mutex::ReaderLockWhen(const Condition& c) {
  Acquire<&Mutex::ReaderLockWhen>(
      this, kRead, "5Mutex14ReaderLockWhenERKNS0_9ConditionE", c);
}

// Mutex::LockWhen<Variant> and Mutex::ReaderLockWhen<Variant>, whose last
// parameter is a Limit; the strings end their mangled names.
#define COALESCE_TSAN_LOCK_WHEN(Variant, Limit, writer, reader)             \
  bool Mutex::LockWhen##Variant(const Condition& c, Limit l) {              \
    return Acquire<&Mutex::LockWhen##Variant>(this, 0, writer, c, l);       \
  }                                                                         \
  bool Mutex::ReaderLockWhen##Variant(const Condition& c, Limit l) {        \
    return Acquire<&Mutex::ReaderLockWhen##Variant>(this, kRead, reader, c, \
                                                    l);                     \
  }
COALESCE_TSAN_LOCK_WHEN(
    WithTimeout, Duration,
    "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE",
    "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE")
COALESCE_TSAN_LOCK_WHEN(
    WithDeadline, Time,
    "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE",
    "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE")
#undef COALESCE_TSAN_LOCK_WHEN

void Mutex::Await(const Condition& c) {
  WaitOn<&Mutex::Await>(this, "5Mutex5AwaitERKNS0_9ConditionE", this, c);
}
bool Mutex::AwaitWithTimeout(const Condition& c, Duration t) {
  return WaitOn<&Mutex::AwaitWithTimeout>(
      this, "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE", this, c,
      t);
}
bool Mutex::AwaitWithDeadline(const Condition& c, Time d) {
  return WaitOn<&Mutex::AwaitWithDeadline>(
      this, "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE", this, c,
      d);
}

void CondVar::Wait(Mutex* mu) {
  WaitOn<&CondVar::Wait>(mu, "7CondVar4WaitEPNS0_5MutexE", this, mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration t) {
  return WaitOn<&CondVar::WaitWithTimeout>(
      mu, "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE", this, mu, t);
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time d) {
  return WaitOn<&CondVar::WaitWithDeadline>(
      mu, "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE", this, mu, d);
}

ABSL_NAMESPACE_END
}  // namespace absl
