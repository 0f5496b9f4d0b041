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
// Every mapping can be guarded: the slots live in chunks that are added as
// needed and never freed (a released slot is reused), so the number of
// guarded mappings is bounded only by memory.
//
// Thread-safety: all functions are thread-safe. The signal handler only
// reads atomics (the chunk list and each slot's range) and sets a flag, so
// it is async-signal-safe and sees every mapping guarded before the fault.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace coalesce {

// A guarded mapping's slot; opaque. Valid from GuardMapping until
// UnguardMapping.
struct MappingGuardSlot;

// Guards [base, base + bytes) and installs the handler on first use.
// RESOURCE_EXHAUSTED when no memory is left for another chunk of slots.
absl::StatusOr<MappingGuardSlot*> GuardMapping(void* base, size_t bytes);
// Stops guarding; call before unmapping. The slot may be reused at once.
void UnguardMapping(MappingGuardSlot* slot);
// Whether a page of the slot's mapping faulted since it was guarded.
bool MappingFaulted(const MappingGuardSlot* slot);

}  // namespace coalesce
