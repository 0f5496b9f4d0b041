#include "server/server.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/metrics/prometheus_service_metrics.h"
#include "spdlog/spdlog.h"

namespace coalesce {
namespace {

// Autotuning activity, read from the selector when Prometheus scrapes.
void AddSelectionMetrics(metrics::Registry* registry,
                         const Selector* selector) {
  metrics::Counter& runs =
      registry
          ->AddCounter("coalesce_autotune_runs_total",
                       "Shapes tuned online (every eligible variant timed on "
                       "scratch buffers).",
                       {})
          .Add({});
  metrics::Counter& seconds =
      registry
          ->AddCounter("coalesce_autotune_seconds_total",
                       "Wall time spent tuning, in seconds.", {})
          .Add({});
  registry->AddCollectHook([&runs, &seconds, selector] {
    // Counters only rise: add what the selector did since the last scrape.
    runs.Increment(static_cast<double>(selector->tunings()) - runs.Value());
    seconds.Increment(selector->tuning_seconds() - seconds.Value());
  });
}

}  // namespace

std::shared_ptr<grpc::Channel> RunningServer::InProcessChannel(
    const grpc::ChannelArguments& args) {
  return server->InProcessChannel(args);
}

absl::StatusOr<std::unique_ptr<RunningServer>> BuildServer(
    const ServerConfig& config, Backend* backend, std::string backend_reason) {
  // Both are process-wide switches that the builder reads: they must be set
  // before BuildAndStart.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  auto running = std::make_unique<RunningServer>();
  running->registry = std::make_unique<metrics::Registry>();
  running->metrics = std::make_unique<metrics::PrometheusServiceMetrics>(
      running->registry.get(), *backend);
  if (!config.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<metrics::HttpServer>> http =
        metrics::HttpServer::Start(config.metrics_listen,
                                   running->registry.get());
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
  running->tensors = std::make_unique<TensorStore>(
      store_options, running->tensor_memory.get());
  if (store_options.ttl != absl::InfiniteDuration()) {
    // A tenth of the TTL: a tensor outlives it by at most 10%.
    running->tensors->StartSweeper(std::clamp(
        store_options.ttl / 10, absl::Milliseconds(100), absl::Seconds(10)));
  }
  running->shared_memory =
      std::make_unique<SharedMemoryRegistry>(config.shared_memory);
  running->service = std::make_unique<TensorOpsService>(
      backend, config, std::move(backend_reason), running->metrics.get(),
      running->selector.get(), running->tensors.get(),
      running->shared_memory.get());
  grpc::ServerBuilder builder;
  if (!config.listen.empty()) {
    builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(),
                             &running->port);
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
  builder.SetResourceQuota(quota);
  builder.RegisterService(running->service.get());
  running->server = builder.BuildAndStart();
  if (running->server == nullptr ||
      (!config.listen.empty() && running->port == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve on '", config.listen,
                     "': the address is malformed, in use or not local"));
  }
  running->service->AttachHealth(running->server->GetHealthCheckService());
  return running;
}

}  // namespace coalesce
