// coalesce-bench service mode: drives a running coalesce-server with
// concurrent streams and reports throughput and latency of each op as a
// ratio to Echo (the gRPC floor) measured in the same run. Flags are in
// service_bench.cc; coalesce_bench.cc dispatches to RunServiceBench.
// Single use per process.
#pragma once

namespace coalesce {

// Runs the service benchmark from the parsed flags; returns the exit status.
int RunServiceBench();

}  // namespace coalesce
