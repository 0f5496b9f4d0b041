#include "server/store/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace coalesce {
namespace {

struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};

Slot g_slots[kMaxGuardedMappings];
std::mutex g_claim_mu;  // claims and releases slots (not the handler)
uintptr_t g_page_bytes = 4096;
struct sigaction g_previous;

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t begin = s.begin.load(std::memory_order_acquire);
    if (begin == 0 || at < begin ||
        at >= s.end.load(std::memory_order_acquire)) {
      continue;
    }
    // mmap is a system call, safe here in practice (Linux), though POSIX
    // does not list it as async-signal-safe.
    void* page = reinterpret_cast<void*>(at & ~(g_page_bytes - 1));
    if (mmap(page, g_page_bytes, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      s.faulted.store(true, std::memory_order_release);
      return;  // the faulting access runs again, on the page of zeros
    }
    break;
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

}  // namespace

int GuardMapping(void* base, size_t bytes) {
  static std::once_flag installed;
  std::call_once(installed, InstallHandler);
  std::lock_guard<std::mutex> lock(g_claim_mu);
  for (int i = 0; i < kMaxGuardedMappings; ++i) {
    Slot& s = g_slots[i];
    if (s.begin.load(std::memory_order_relaxed) != 0) continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(base);
    s.faulted.store(false, std::memory_order_relaxed);
    s.end.store(begin + bytes, std::memory_order_release);
    s.begin.store(begin, std::memory_order_release);
    return i;
  }
  return -1;
}

void UnguardMapping(int slot) {
  if (slot < 0 || slot >= kMaxGuardedMappings) return;
  std::lock_guard<std::mutex> lock(g_claim_mu);
  g_slots[slot].begin.store(0, std::memory_order_release);
  g_slots[slot].end.store(0, std::memory_order_release);
}

bool MappingFaulted(int slot) {
  if (slot < 0 || slot >= kMaxGuardedMappings) return false;
  return g_slots[slot].faulted.load(std::memory_order_acquire);
}

}  // namespace coalesce
