// Configuration of the gRPC server that BuildServer (server.h) starts, shared
// by main (from flags), the service (for limits) and the tests. A plain
// value; thread-safe to read.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kernels/selection/selector.h"
#include "server/auth/token_file.h"
#include "server/metrics/service_metrics.h"
#include "server/store/shared_memory.h"

namespace coalesce {

class AccessLog;

// TLS on the gRPC port: PEM files. cert and key together turn TLS on;
// client_ca also requires and verifies a client certificate (mTLS), whose
// subject's common name is then the caller's identity.
struct TlsConfig {
  std::string cert_path;
  std::string key_path;
  std::string client_ca_path;
};

struct ServerConfig {
  // host:port to serve gRPC on; port 0 binds a free port (RunningServer says
  // which). Empty serves only the in-process channel (tests).
  std::string listen = "0.0.0.0:50051";
  // host:port to serve Prometheus' /metrics on (IPv4); port 0 binds a free
  // port (RunningServer says which). Empty serves no HTTP: the tests read
  // RunningServer::registry directly. main defaults it to 0.0.0.0:9464.
  std::string metrics_listen;
  // Per-kernel detail of the kernel metric families (--metrics_detail).
  MetricsDetail metrics_detail = MetricsDetail::kBasic;
  // host:port to serve the KServe v2 protocol over HTTP/REST on (IPv4;
  // server/frontend/http/rest_server.h); port 0 binds a free port. Empty:
  // off.
  std::string http_listen;
  // Largest tensor, input or output, a request may carry or produce. Inline
  // tensors are protobuf `bytes`, which cannot exceed 2 GiB - 1 anyway.
  int64_t max_tensor_bytes = int64_t{1} << 30;
  // gRPC's receive and send limit. A GEMM carries three tensors, so the
  // default is gRPC's ceiling rather than a multiple of max_tensor_bytes.
  int max_message_bytes = std::numeric_limits<int>::max();
  // Variant selection: autotuning mode, tuning cache and shipped table
  // (kernels/selection/selector.h).
  SelectorOptions selection;
  // Transport security and authentication (server/auth/authenticator.h).
  TlsConfig tls;
  // Bearer tokens (--auth_tokens, already parsed); empty: none.
  TokenTable auth_tokens;
  // Client-certificate identities with the admin role.
  std::vector<std::string> admin_identities;
  // Path of the local Unix-socket listener (server/auth/local_socket.h);
  // empty: none. Shared memory is registered only over it.
  std::string unix_socket;
  // Tensors kept on the server (server/store/tensor_store.h): bytes per client,
  // bytes in all, and how long an unused tensor lives (0: until deleted).
  int64_t tensor_quota_bytes = int64_t{4} << 30;
  int64_t tensor_cap_bytes = int64_t{8} << 30;
  double tensor_ttl_seconds = 600;
  // Uploads: at once per client, and how long one may stall before it is
  // ended and its reservation freed (0: never).
  int max_uploads_per_client = 4;
  // Tensors held at once, per client and in all (TensorStoreOptions).
  int64_t max_tensors_per_client = 65536;
  int64_t max_tensors = 262144;
  double upload_idle_timeout_seconds = 60;
  // Client shared-memory regions (server/store/shared_memory.h): off unless
  // allowed, keys under a prefix, regions bounded.
  SharedMemoryOptions shared_memory;
  // gRPC transport settings, chosen in docs/DATAPATH.md. HTTP/2 streams one
  // connection may carry at once (the bench's --concurrency shares one).
  int max_concurrent_streams = 1024;
  // Threads the synchronous services (reflection) may run at once
  // (grpc::ResourceQuota); coalesce.v1 uses the callback API.
  // A request arriving past it fails with RESOURCE_EXHAUSTED, so this is a
  // safety bound, not a tuning knob.
  int max_threads = 1024;
  // gRPC's memory for the calls in flight (its resource quota): messages
  // being received or sent. Past it gRPC pushes back: new streams are
  // refused (RESOURCE_EXHAUSTED) and, under heavy pressure, connections
  // closed. Without it, concurrent large inline messages take memory
  // without bound. 0: unbounded (gRPC's default): any bound, even 64 GiB,
  // cost 64 KiB transposes at concurrency 64 about a tenth of their rate
  // on the CPU backend, so deployments set one (deploy/k8s).
  int64_t grpc_memory_bytes = 0;
  // The device's request queue (server/scheduler/scheduler.h): ops running
  // at once (0: the backend's own figure, Backend::concurrency()), and the
  // requests and request bytes that may wait; past either bound a request
  // is refused at once with RESOURCE_EXHAUSTED.
  int max_in_flight = 0;
  int64_t max_queue_requests = 1024;
  int64_t max_queue_bytes = int64_t{1} << 30;
  // Dynamic batching (server/scheduler/scheduler.h, kernels/core/
  // stacking.h): concurrent requests of these ops that stack run as one
  // launch; a batch holds at most batch_max_requests requests and
  // batch_max_bytes of their operands, and waits up to batch_max_delay_us
  // for more to arrive (0: takes what already waits). batch_ops unset: the
  // backend's default (BatchedOpsByDefault).
  std::optional<std::vector<OpKind>> batch_ops;
  // Batch only requests whose stacked inputs are in host memory (inline or
  // shared memory): set by the backend's default, where a batch of device
  // handles measured no faster (it adds a gather and a scatter launch).
  bool batch_host_inputs_only = false;
  int batch_max_requests = 64;
  int64_t batch_max_bytes = int64_t{4} << 20;
  int64_t batch_max_delay_us = 0;
  // Ops moving at most this many bytes run on the thread that decoded them
  // when their device's scheduler is idle (Job::may_run_directly), instead
  // of waking a scheduler thread; 0: never. Unset: the backend's default
  // (DirectRunMaxBytesByDefault).
  std::optional<int64_t> direct_run_max_bytes;
  // Direct runs only while the device's requests arrive at most this many
  // times a second (SchedulerOptions::direct_run_max_rate); 0: at any rate.
  // Unset: the backend's default (DirectRunMaxRateByDefault).
  std::optional<double> direct_run_max_rate;
  // Initial HTTP/2 stream flow-control window in bytes (gRPC's
  // lookahead; BDP probing grows it from there).
  int stream_window_bytes = 8 << 20;
  // Where each gRPC and REST call's line goes (server/logging/
  // access_log.h); not owned, must outlive the server. Null: no access log
  // (request ids are still resolved and returned).
  AccessLog* access_log = nullptr;
};

// protobuf `bytes` fields hold at most 2^31 - 1 bytes.
inline constexpr int64_t kMaxInlineTensorBytes =
    std::numeric_limits<int32_t>::max();

}  // namespace coalesce
