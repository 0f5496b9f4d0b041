// The standard process_* families (as Prometheus' client libraries export
// them): CPU seconds, resident and virtual memory, open and maximum file
// descriptors, threads and start time, read from /proc/self on every
// collection. Linux only.
#pragma once

#include "server/metrics/registry.h"

namespace coalesce::metrics {

// Registers the families in registry, refreshed by a collect hook.
void AddProcessMetrics(Registry* registry);

// What the hook reads; exposed for the tests. Negative where unreadable.
struct ProcessStats {
  double cpu_seconds = -1;  // user + system
  double resident_bytes = -1;
  double virtual_bytes = -1;
  double open_fds = -1;
  double max_fds = -1;
  double threads = -1;
  double start_time_seconds = -1;  // since the Unix epoch
};
ProcessStats ReadProcessStats();

// The resident set alone (/proc/self/statm), 0 when unreadable: the memory
// the CPU backend computes in, its coalesce_device_memory_used_bytes.
double ProcessResidentBytes();

}  // namespace coalesce::metrics
