// BuildServer: the one way to start the gRPC server, used by main and by the
// tests. It serves coalesce.v1.TensorOps (with its tensor store and
// shared-memory registry), the KServe v2 inference.GRPCInferenceService on
// the same port, the standard health service
// (grpc.health.v1, SERVING while the backend is healthy) and server
// reflection, and Prometheus metrics over HTTP from a Registry of its own
// (no process-wide metrics state: every server, every test, starts at zero).
// RunningServer is thread-compatible: build, use and destroy it from one
// thread; the servers inside serve from their own threads.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/server.h>
#include <grpcpp/support/channel_arguments.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/core/backend.h"
#include "kernels/selection/selector.h"
#include "server/auth/authenticator.h"
#include "server/auth/local_socket.h"
#include "server/config.h"
#include "server/frontend/http/rest_server.h"
#include "server/frontend/kserve/service.h"
#include "server/frontend/native/service.h"
#include "server/metrics/http_server.h"
#include "server/metrics/registry.h"
#include "server/metrics/service_metrics.h"
#include "server/scheduler/scheduler.h"
#include "server/store/shared_memory.h"
#include "server/store/tensor_store.h"

namespace coalesce {

struct RunningServer {
  // Stops the metrics port before anything its collect hooks read goes.
  ~RunningServer() { metrics_http.reset(); }

  // A channel to the server that bypasses the network (tests). Responses
  // above the client's default 4 MiB need args.SetMaxReceiveMessageSize.
  // Drain(deadline) on every device's scheduler, at once.
  void DrainSchedulers(absl::Time deadline);

  std::shared_ptr<grpc::Channel> InProcessChannel(
      const grpc::ChannelArguments& args = grpc::ChannelArguments());

  // Readiness for the metrics port's /readyz: set once BuildServer has
  // started every service, and once a drain began (the caller sets it, with
  // the health service's Shutdown). Declared first: read until metrics_http
  // stops.
  std::atomic<bool> serving{false};
  std::atomic<bool> draining{false};

  // Members are destroyed in reverse order: grpc::Server's destructor
  // drains in-flight calls into the service, which reports to metrics, which
  // live in registry. metrics_http goes first of all (~RunningServer): the
  // registry's collect hooks read the members below.
  std::shared_ptr<metrics::Registry> registry;
  std::unique_ptr<ServiceMetrics> metrics;
  std::unique_ptr<metrics::HttpServer> metrics_http;  // null: no metrics_listen
  std::unique_ptr<Selector> selector;  // the service chooses variants here
  // Tensors kept on the server (in the backend's resident memory) and
  // registered shared memory: freed and unmapped when the server stops.
  std::unique_ptr<TensorMemory> tensor_memory;
  std::unique_ptr<TensorStore> tensors;
  std::unique_ptr<SharedMemoryRegistry> shared_memory;
  // Who each call is (server/auth/): the uids of local-socket peers and the
  // per-call identity.
  std::unique_ptr<PeerCredentials> peer_credentials;
  std::unique_ptr<Authenticator> authenticator;
  // Admit and order the ops on each of the backend's devices (by device
  // index); outlive the service's calls (grpc::Server, destroyed first,
  // cancels and waits for them).
  std::vector<std::unique_ptr<Scheduler>> schedulers;
  std::unique_ptr<TensorOpsService> service;
  // inference.GRPCInferenceService (KServe v2), which runs its ops through
  // service.
  std::unique_ptr<InferenceService> inference;
  std::unique_ptr<grpc::Server> server;
  // Accepts local-socket connections into server; stopped first.
  std::unique_ptr<LocalSocketListener> local_socket;
  // The KServe v2 protocol over HTTP/REST, calling into server through its
  // in-process channel; null without config.http_listen. Stopped first.
  std::unique_ptr<RestServer> http;
  // The TCP port actually bound (config.listen may ask for port 0); 0 when
  // config.listen is empty.
  int port = 0;
  // The same for config.metrics_listen.
  int metrics_port = 0;
  // The same for config.http_listen.
  int http_port = 0;
};

// The ops whose requests a server on a backend of this kind batches when
// --batch_ops is auto (then only requests with their inputs in host memory:
// ServerConfig::batch_host_inputs_only): where batched launches measured
// faster (docs/PERFORMANCE.md). None on the CPU, whose kernels already
// spread one request over every core.
std::vector<OpKind> BatchedOpsByDefault(BackendKind kind);

// ServerConfig::direct_run_max_bytes when unset: 1 MiB. On the CPU backend
// a lone 1 KiB transpose spent 22-26 us of its handler's 40 waking a
// scheduler thread; on H100 hosts direct runs took 8-119 us off a lone
// request's median (docs/PERFORMANCE.md).
int64_t DirectRunMaxBytesByDefault(BackendKind kind);

// ServerConfig::direct_run_max_rate when unset: 10,000 requests a second on
// a GPU, where a request run directly under load holds gRPC's thread for
// its launches and wait (64 KiB pipelined transposes lost 5-12% at
// concurrency 64 on some hosts); 0 (any rate) on the CPU backend, where
// the op itself is the work.
double DirectRunMaxRateByDefault(BackendKind kind);

// Starts a server on config.listen serving backend (not owned; it must
// outlive the server). backend_reason is what GetServerInfo reports as the
// reason for this backend. UNAVAILABLE when an address cannot be bound;
// NOT_FOUND or INVALID_ARGUMENT for unreadable TLS files.
absl::StatusOr<std::unique_ptr<RunningServer>> BuildServer(
    const ServerConfig& config, Backend* backend, std::string backend_reason);

}  // namespace coalesce
