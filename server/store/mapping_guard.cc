#include "server/store/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>

#include "absl/status/status.h"

namespace coalesce {

// A guarded range; begin 0 marks the slot free. The handler reads it without
// a lock, so a slot is filled end first and begin last, and freed begin first.
struct MappingGuardSlot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};

namespace {

static_assert(std::atomic<uintptr_t>::is_always_lock_free &&
                  std::atomic<bool>::is_always_lock_free,
              "the SIGBUS handler reads these; they must not take a lock");

// Slots come in chunks so that the handler walks few pointers; the first is
// static, the rest are allocated when every slot before them is taken.
constexpr int kSlotsPerChunk = 256;

struct Chunk {
  MappingGuardSlot slots[kSlotsPerChunk];
  std::atomic<Chunk*> next{nullptr};  // set once, never cleared
};
static_assert(std::atomic<Chunk*>::is_always_lock_free,
              "the SIGBUS handler walks the chunk list");

Chunk g_first;
// Claims and releases slots and adds chunks; the handler takes no lock.
std::mutex g_claim_mu;
Chunk* g_last = &g_first;  // guarded by g_claim_mu
uintptr_t g_page_bytes = 4096;
struct sigaction g_previous;

MappingGuardSlot* FindSlot(uintptr_t at) {
  for (Chunk* c = &g_first; c != nullptr;
       c = c->next.load(std::memory_order_acquire)) {
    for (MappingGuardSlot& s : c->slots) {
      const uintptr_t begin = s.begin.load(std::memory_order_acquire);
      if (begin != 0 && at >= begin &&
          at < s.end.load(std::memory_order_acquire)) {
        return &s;
      }
    }
  }
  return nullptr;
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  if (MappingGuardSlot* s = FindSlot(at)) {
    // mmap is a system call, safe here in practice (Linux), though POSIX
    // does not list it as async-signal-safe.
    void* page = reinterpret_cast<void*>(at & ~(g_page_bytes - 1));
    if (mmap(page, g_page_bytes, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      s->faulted.store(true, std::memory_order_release);
      return;  // the faulting access runs again, on the page of zeros
    }
  }
  // Not a guarded mapping: what would have happened without us.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 &&
      g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default action: the faulting access runs again and ends the process.
  signal(SIGBUS, SIG_DFL);
}

void InstallHandler() {
  g_page_bytes = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  struct sigaction action = {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &g_previous);
}

// A free slot, adding a chunk when all are taken; null when out of memory.
MappingGuardSlot* ClaimLocked() {
  for (Chunk* c = &g_first; c != nullptr;
       c = c->next.load(std::memory_order_relaxed)) {
    for (MappingGuardSlot& s : c->slots) {
      if (s.begin.load(std::memory_order_relaxed) == 0) return &s;
    }
  }
  Chunk* chunk = new (std::nothrow) Chunk;
  if (chunk == nullptr) return nullptr;
  // Published only once its slots are initialized (all free).
  g_last->next.store(chunk, std::memory_order_release);
  g_last = chunk;
  return &chunk->slots[0];
}

}  // namespace

absl::StatusOr<MappingGuardSlot*> GuardMapping(void* base, size_t bytes) {
  static std::once_flag installed;
  std::call_once(installed, InstallHandler);
  std::lock_guard<std::mutex> lock(g_claim_mu);
  MappingGuardSlot* s = ClaimLocked();
  if (s == nullptr) {
    return absl::ResourceExhaustedError(
        "shared memory: no memory left to guard another mapping");
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(base);
  s->faulted.store(false, std::memory_order_relaxed);
  s->end.store(begin + bytes, std::memory_order_release);
  s->begin.store(begin, std::memory_order_release);
  return s;
}

void UnguardMapping(MappingGuardSlot* slot) {
  std::lock_guard<std::mutex> lock(g_claim_mu);
  slot->begin.store(0, std::memory_order_release);
  slot->end.store(0, std::memory_order_release);
}

bool MappingFaulted(const MappingGuardSlot* slot) {
  return slot->faulted.load(std::memory_order_acquire);
}

}  // namespace coalesce
