#include "server/server.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "server/logging/call_log.h"
#include "server/metrics/process_metrics.h"
#include "server/metrics/prometheus_service_metrics.h"
#include "server/metrics/registry.h"
#include "spdlog/spdlog.h"

namespace coalesce {
namespace {

// A PEM file's contents; NOT_FOUND naming the flag when unreadable.
absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty()) {
    return absl::NotFoundError(
        absl::StrCat("--", flag, ": cannot read '", path, "'"));
  }
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(
    const TlsConfig& tls) {
  if (tls.cert_path.empty() != tls.key_path.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key: give both or neither");
  }
  if (tls.cert_path.empty()) {
    if (!tls.client_ca_path.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  COALESCE_ASSIGN_OR_RETURN(std::string cert,
                            ReadPem(tls.cert_path, "tls_cert"));
  COALESCE_ASSIGN_OR_RETURN(std::string key, ReadPem(tls.key_path, "tls_key"));
  grpc::SslServerCredentialsOptions options(
      tls.client_ca_path.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!tls.client_ca_path.empty()) {
    COALESCE_ASSIGN_OR_RETURN(options.pem_root_certs,
                              ReadPem(tls.client_ca_path, "tls_client_ca"));
  }
  options.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
  return grpc::SslServerCredentials(options);
}

// Whether host:port binds only the loopback interface.
bool IsLoopback(absl::string_view address) {
  absl::string_view host = address.substr(0, address.rfind(':'));
  return absl::StartsWith(host, "127.") || host == "[::1]" ||
         host == "localhost" || host == "::1";
}

// Says loudly what an exposed server lacks; once per start. The HTTP/REST
// port has no TLS of its own.
void WarnIfExposed(const ServerConfig& config, bool authenticated) {
  for (const auto& [address, tls] :
       {std::pair<std::string, bool>{config.listen,
                                     !config.tls.cert_path.empty()},
        {config.http_listen, false}}) {
    if (address.empty() || IsLoopback(address)) continue;
    if (!authenticated) {
      spdlog::warn(
          "*** {} is served WITHOUT AUTHENTICATION: any client that reaches "
          "it can run ops, read and delete every client's tensors, and "
          "claim any identity. Give --auth_tokens (and --tls_cert/--tls_key) "
          "or --tls_client_ca, or listen on 127.0.0.1 only. ***",
          address);
    } else if (!tls) {
      spdlog::warn(
          "*** {} carries bearer tokens in PLAINTEXT: anyone on the path can "
          "read and replay them. Give --tls_cert and --tls_key (gRPC), or "
          "serve HTTP on 127.0.0.1 behind a TLS proxy. ***",
          address);
    }
  }
}

// Autotuning activity, read from the selector when Prometheus scrapes.
void AddSelectionMetrics(metrics::Registry* registry,
                         const Selector* selector) {
  metrics::Counter& runs =
      registry
          ->AddCounter("coalesce_autotune_runs_total",
                       "Shapes tuned online (every eligible variant timed on "
                       "scratch buffers).")
          .Add({});
  metrics::Counter& seconds =
      registry
          ->AddCounter("coalesce_autotune_seconds_total",
                       "Wall time spent tuning, in seconds.")
          .Add({});
  registry->AddCollectHook([&runs, &seconds, selector] {
    metrics::RaiseTo(runs, static_cast<double>(selector->tunings()));
    metrics::RaiseTo(seconds, selector->tuning_seconds());
  });
}

// The device queue's state, read from the scheduler when Prometheus
// scrapes.
void AddSchedulerMetrics(metrics::Registry* registry,
                         const Scheduler* scheduler,
                         const SchedulerOptions& options,
                         const DeviceInfo& device) {
  const metrics::Labels labels = metrics::DeviceLabels(device);
  metrics::Gauge& queued =
      registry
          ->AddGauge("coalesce_device_queue_requests",
                     "Requests admitted and waiting for the device.")
          .Add(labels);
  metrics::Gauge& queued_bytes =
      registry
          ->AddGauge("coalesce_device_queue_bytes",
                     "Bytes of the requests waiting for the device.")
          .Add(labels);
  metrics::Gauge& running =
      registry
          ->AddGauge("coalesce_device_in_flight_requests",
                     "Requests running on the device now.")
          .Add(labels);
  registry
      ->AddGauge("coalesce_device_max_in_flight_requests",
                 "Requests the device runs at once (--max_in_flight).")
      .Add(labels)
      .Set(options.max_in_flight);
  metrics::Counter& direct =
      registry
          ->AddCounter("coalesce_device_direct_runs_total",
                       "Requests run on the thread that received them, the "
                       "device being idle and below --direct_run_max_rate "
                       "(--direct_run_max_bytes).")
          .Add(labels);
  registry->AddCollectHook(
      [&queued, &queued_bytes, &running, &direct, scheduler] {
        const Scheduler::Stats s = scheduler->stats();
        queued.Set(static_cast<double>(s.queued));
        queued_bytes.Set(static_cast<double>(s.queued_bytes));
        running.Set(static_cast<double>(s.in_flight));
        metrics::RaiseTo(direct, static_cast<double>(s.direct_runs));
      });
}

// Handles and shared memory, read from the stores when Prometheus scrapes.
void AddStoreMetrics(metrics::Registry* registry, const TensorStore* tensors,
                     const SharedMemoryRegistry* shared_memory) {
  metrics::Gauge& bytes =
      registry
          ->AddGauge("coalesce_tensor_store_bytes",
                     "Bytes charged to stored tensors (handles) and uploads "
                     "in progress, in all owners.")
          .Add({});
  metrics::Gauge& handles =
      registry
          ->AddGauge("coalesce_tensor_store_tensors",
                     "Stored tensors (committed handles), in all owners.")
          .Add({});
  metrics::Gauge& uploads =
      registry
          ->AddGauge("coalesce_tensor_store_uploads_in_progress",
                     "PutTensor uploads begun and not yet committed.")
          .Add({});
  metrics::Family<metrics::Counter>& expired = registry->AddCounter(
      "coalesce_tensor_store_expired_total",
      "Tensors freed by the store itself, by reason: ttl (unused for "
      "--tensor_ttl_s) or upload_idle (an upload idle for "
      "--upload_idle_timeout_s).");
  metrics::Counter& ttl = expired.Add({{"reason", "ttl"}});
  metrics::Counter& idle = expired.Add({{"reason", "upload_idle"}});
  metrics::Family<metrics::Gauge>& region_family = registry->AddGauge(
      "coalesce_shared_memory_regions",
      "Shared-memory regions registered, by kind (system or cuda).");
  metrics::Family<metrics::Gauge>& region_bytes_family = registry->AddGauge(
      "coalesce_shared_memory_bytes",
      "Bytes of the registered shared-memory regions, by kind.");
  metrics::Gauge& system_regions = region_family.Add({{"kind", "system"}});
  metrics::Gauge& cuda_regions = region_family.Add({{"kind", "cuda"}});
  metrics::Gauge& system_bytes = region_bytes_family.Add({{"kind", "system"}});
  metrics::Gauge& cuda_bytes = region_bytes_family.Add({{"kind", "cuda"}});
  registry->AddCollectHook([&, tensors, shared_memory] {
    const TensorStore::Stats t = tensors->stats();
    bytes.Set(static_cast<double>(t.bytes));
    handles.Set(static_cast<double>(t.tensors));
    uploads.Set(static_cast<double>(t.uploads));
    metrics::RaiseTo(ttl, static_cast<double>(t.expired_tensors));
    metrics::RaiseTo(idle, static_cast<double>(t.abandoned_uploads));
    const SharedMemoryRegistry::Stats m = shared_memory->stats();
    system_regions.Set(static_cast<double>(m.system_regions));
    system_bytes.Set(static_cast<double>(m.system_bytes));
    cuda_regions.Set(static_cast<double>(m.cuda_regions));
    cuda_bytes.Set(static_cast<double>(m.cuda_bytes));
  });
}

}  // namespace

void RunningServer::DrainSchedulers(absl::Time deadline) {
  // At once: each waits for its own running jobs.
  std::vector<std::thread> drains;
  for (const std::unique_ptr<Scheduler>& s : schedulers) {
    drains.emplace_back([&s, deadline] { s->Drain(deadline); });
  }
  for (std::thread& t : drains) t.join();
}

std::shared_ptr<grpc::Channel> RunningServer::InProcessChannel(
    const grpc::ChannelArguments& args) {
  return server->InProcessChannel(args);
}

std::vector<OpKind> BatchedOpsByDefault(BackendKind kind) {
  if (kind != BackendKind::kCuda) return {};
  return {OpKind::kTranspose, OpKind::kConvertLayout, OpKind::kGeluLayerNorm};
}

int64_t DirectRunMaxBytesByDefault(BackendKind) { return int64_t{1} << 20; }

double DirectRunMaxRateByDefault(BackendKind kind) {
  return kind == BackendKind::kCpu ? 0 : 10000;
}

absl::StatusOr<std::unique_ptr<RunningServer>> BuildServer(
    const ServerConfig& config, Backend* backend, std::string backend_reason) {
  // Both are process-wide switches that the builder reads: they must be set
  // before BuildAndStart.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  auto running = std::make_unique<RunningServer>();
  running->registry = std::make_shared<metrics::Registry>();
  running->metrics = std::make_unique<metrics::PrometheusServiceMetrics>(
      running->registry.get(), *backend, config.metrics_detail);
  metrics::AddProcessMetrics(running->registry.get());
  if (!config.metrics_listen.empty()) {
    // The backend outlives the server; running's flags outlive the HTTP
    // server (RunningServer's member order).
    RunningServer* r = running.get();
    absl::StatusOr<std::unique_ptr<metrics::HttpServer>> http =
        metrics::HttpServer::Start(
            config.metrics_listen, running->registry,
            [r, backend]() -> absl::Status {
              if (r->draining.load()) {
                return absl::UnavailableError(
                    "draining: the server is shutting down");
              }
              if (!r->serving.load()) {
                return absl::UnavailableError("starting");
              }
              return backend->Health();
            });
    if (!http.ok()) return http.status();
    running->metrics_http = std::move(*http);
    running->metrics_port = running->metrics_http->port();
  }
  running->selector = std::make_unique<Selector>(backend, config.selection);
  std::vector<std::string> warnings;
  running->selector->Init(&warnings);
  for (const std::string& w : warnings) spdlog::warn("{}", w);
  if (config.selection.autotune != AutotuneMode::kOff ||
      running->selector->table().size() > 0) {
    spdlog::info("selection: {} shipped table entries, {} cached tunings",
                 running->selector->table().size(),
                 running->selector->cache().size());
  }
  AddSelectionMetrics(running->registry.get(), running->selector.get());
  running->tensor_memory = std::make_unique<BackendTensorMemory>(backend);
  TensorStoreOptions store_options;
  store_options.quota_bytes = config.tensor_quota_bytes;
  store_options.cap_bytes = config.tensor_cap_bytes;
  store_options.ttl = config.tensor_ttl_seconds > 0
                          ? absl::Seconds(config.tensor_ttl_seconds)
                          : absl::InfiniteDuration();
  store_options.upload_idle_timeout =
      config.upload_idle_timeout_seconds > 0
          ? absl::Seconds(config.upload_idle_timeout_seconds)
          : absl::InfiniteDuration();
  store_options.max_uploads_per_owner = config.max_uploads_per_client;
  store_options.max_tensors_per_owner = config.max_tensors_per_client;
  store_options.max_tensors = config.max_tensors;
  running->tensors = std::make_unique<TensorStore>(
      store_options, running->tensor_memory.get());
  if (store_options.ttl != absl::InfiniteDuration() ||
      store_options.upload_idle_timeout != absl::InfiniteDuration()) {
    running->tensors->StartSweeper(TensorStore::SweepPeriod(store_options));
  }
  running->shared_memory =
      std::make_unique<SharedMemoryRegistry>(config.shared_memory);
  AddStoreMetrics(running->registry.get(), running->tensors.get(),
                  running->shared_memory.get());
  COALESCE_ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::ServerCredentials> credentials,
      Credentials(config.tls));
  running->peer_credentials = std::make_unique<PeerCredentials>();
  AuthOptions auth;
  auth.tokens = config.auth_tokens;
  auth.client_certificates = !config.tls.client_ca_path.empty();
  auth.admin_identities = config.admin_identities;
  running->authenticator = std::make_unique<Authenticator>(
      std::move(auth), running->peer_credentials.get());
  WarnIfExposed(config, running->authenticator->enabled());
  SchedulerOptions scheduling;
  // A scheduler per device (below): without --max_in_flight, each takes its
  // device's share of the backend's concurrency.
  scheduling.max_in_flight =
      config.max_in_flight > 0
          ? config.max_in_flight
          : std::max(1, backend->concurrency() / backend->device_count());
  scheduling.max_queue_requests = config.max_queue_requests;
  scheduling.max_queue_bytes = config.max_queue_bytes;
  ServerConfig service_config = config;
  if (!service_config.batch_ops.has_value()) {
    service_config.batch_ops = BatchedOpsByDefault(backend->kind());
    service_config.batch_host_inputs_only = true;
  }
  if (!service_config.direct_run_max_bytes.has_value()) {
    service_config.direct_run_max_bytes =
        DirectRunMaxBytesByDefault(backend->kind());
  }
  if (!service_config.direct_run_max_rate.has_value()) {
    service_config.direct_run_max_rate =
        DirectRunMaxRateByDefault(backend->kind());
  }
  scheduling.direct_run_max_rate = *service_config.direct_run_max_rate;
  // No op batched: the scheduler never waits for a batch to fill.
  scheduling.batch_max_requests =
      service_config.batch_ops->empty() ? 1 : config.batch_max_requests;
  scheduling.batch_max_bytes = config.batch_max_bytes;
  scheduling.batch_max_delay = absl::Microseconds(config.batch_max_delay_us);
  {
    std::vector<std::string> names;
    for (OpKind op : *service_config.batch_ops) {
      names.emplace_back(OpName(op));
    }
    spdlog::info("batching: {}{} (up to {} requests, {} bytes, {} us delay)",
                 names.empty() ? std::string("off") : absl::StrJoin(names, ","),
                 service_config.batch_host_inputs_only && !names.empty()
                     ? " for requests with their inputs in host memory"
                     : "",
                 config.batch_max_requests, config.batch_max_bytes,
                 config.batch_max_delay_us);
  }
  if (*service_config.direct_run_max_bytes > 0) {
    spdlog::info(
        "direct runs: ops moving up to {} bytes run on the receiving thread "
        "while their device is idle{}",
        *service_config.direct_run_max_bytes,
        *service_config.direct_run_max_rate > 0
            ? absl::StrCat(" and gets at most ",
                           *service_config.direct_run_max_rate, " requests/s")
            : std::string());
  }
  // A scheduler per device: its own queue, workers and fairness.
  std::vector<Scheduler*> schedulers;
  for (int i = 0; i < backend->device_count(); ++i) {
    const DeviceInfo& device = backend->device_at(i);
    running->schedulers.push_back(std::make_unique<Scheduler>(
        absl::StrCat(BackendName(backend->kind()), ":", device.ordinal),
        scheduling));
    schedulers.push_back(running->schedulers.back().get());
    AddSchedulerMetrics(running->registry.get(), schedulers.back(), scheduling,
                        device);
  }
  running->service = std::make_unique<TensorOpsService>(
      backend, service_config, std::move(backend_reason),
      running->metrics.get(), running->selector.get(), running->tensors.get(),
      running->shared_memory.get(), running->authenticator.get(),
      std::move(schedulers));
  running->inference = std::make_unique<InferenceService>(
      backend, running->authenticator.get(), running->metrics.get(),
      running->service.get(), running->shared_memory.get(), COALESCE_VERSION);
  grpc::ServerBuilder builder;
  InstallCallLogging(builder, config.access_log);
  if (!config.listen.empty()) {
    builder.AddListeningPort(config.listen, credentials, &running->port);
  }
  // Transport settings; docs/DATAPATH.md says why each is what it is.
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  builder.SetMaxSendMessageSize(config.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             config.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                             config.stream_window_bytes);
  grpc::ResourceQuota quota("coalesce");
  quota.SetMaxThreads(config.max_threads);
  if (config.grpc_memory_bytes > 0) quota.Resize(config.grpc_memory_bytes);
  builder.SetResourceQuota(quota);
  builder.RegisterService(running->service.get());
  builder.RegisterService(running->inference.get());
  running->server = builder.BuildAndStart();
  if (running->server == nullptr ||
      (!config.listen.empty() && running->port == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve on '", config.listen,
                     "': the address is malformed, in use or not local"));
  }
  running->service->AttachHealth(
      running->server->GetHealthCheckService(),
      {inference::GRPCInferenceService::service_full_name()});
  if (!config.unix_socket.empty()) {
    COALESCE_ASSIGN_OR_RETURN(
        running->local_socket,
        LocalSocketListener::Start(config.unix_socket, running->server.get(),
                                   running->peer_credentials.get()));
  }
  if (!config.http_listen.empty()) {
    // The same message bound as gRPC's, on the body and on the in-process
    // calls it becomes.
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(config.max_message_bytes);
    args.SetMaxSendMessageSize(config.max_message_bytes);
    COALESCE_ASSIGN_OR_RETURN(
        running->http,
        RestServer::Start(config.http_listen,
                          running->server->InProcessChannel(args),
                          config.max_message_bytes, config.access_log));
    running->http_port = running->http->port();
  }
  running->serving.store(true);
  return running;
}

}  // namespace coalesce
