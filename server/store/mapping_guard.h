// Keeps a client's shared-memory object from killing the server when the
// client shrinks it while a request is reading or writing it. Touching a
// page of a MAP_SHARED mapping past the end of its object raises SIGBUS,
// whose default action ends the process. A guarded mapping's SIGBUS is
// caught instead: the faulting page is replaced by a private page of
// zeros (so the access completes), the mapping is marked faulted, and the
// server fails the request and every later use of the region with
// FAILED_PRECONDITION (shared_memory.h). A SIGBUS anywhere else goes to the
// handler that was installed before, or to the default action.
//
// Thread-safety: all functions are thread-safe; the signal handler only
// reads the table of guarded mappings and sets flags (async-signal-safe).
#pragma once

#include <cstddef>

namespace coalesce {

// Guards [base, base + bytes): the slot to pass to the functions below, or
// -1 when all kMaxGuardedMappings slots are taken (the mapping then stays
// unguarded, as every mapping was before). Installs the handler on first
// use.
inline constexpr int kMaxGuardedMappings = 1024;
int GuardMapping(void* base, size_t bytes);
// Stops guarding; call before unmapping. slot -1 is a no-op.
void UnguardMapping(int slot);
// Whether a page of the slot's mapping faulted since it was guarded.
bool MappingFaulted(int slot);

}  // namespace coalesce
