#include "server/service.h"

#include <chrono>
#include <string>
#include <utility>
#include <variant>

#include "absl/status/statusor.h"
#include "kernels/backends.h"
#include "kernels/core/select.h"
#include "kernels/core/status_macros.h"
#include "server/status.h"
#include "spdlog/spdlog.h"

namespace coalesce {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

DType OutputDType(const Problem& p) {
  return std::visit([](const auto& typed) { return typed.dtype; }, p);
}

// The FLOP/s ceiling that applies to p, chosen as KernelVariant's default
// estimate chooses it: 16-bit and TF32 GEMMs run on tensor cores.
double PeakFlops(const Problem& p, const DeviceInfo& dev) {
  if (const auto* g = std::get_if<GemmProblem>(&p)) {
    if ((g->dtype != DType::kFloat32 || g->allow_tf32) &&
        dev.peak_tensor_flops > 0) {
      return dev.peak_tensor_flops;
    }
  }
  return dev.peak_fp32_flops;
}

// Which roofline ceiling applies: compute when the arithmetic intensity is
// past the ridge point (peak FLOP/s over bandwidth).
std::string Bound(const Problem& p, const DeviceInfo& dev, double intensity) {
  const double bandwidth = dev.measured_copy_bandwidth > 0
                               ? dev.measured_copy_bandwidth
                               : dev.theoretical_bandwidth;
  const double peak = PeakFlops(p, dev);
  if (bandwidth <= 0 || peak <= 0) {
    // No ridge point known: only pure data movement is surely memory-bound.
    return intensity > 0 ? "compute" : "memory";
  }
  return intensity > peak / bandwidth ? "compute" : "memory";
}

// The figures of one run that both the KernelReport and the metrics carry,
// computed once so that the two always agree.
KernelObservation Observe(const DeviceInfo& dev, const Problem& p,
                          const KernelVariant& variant, const RunResult& run) {
  KernelObservation k;
  k.variant = &variant;
  k.op = OpOf(p);
  k.dtype = OutputDType(p);
  k.bytes_moved = MinBytesMoved(p);
  const double seconds = run.kernel_seconds;
  k.bytes_per_second = seconds > 0 ? k.bytes_moved / seconds : 0;
  k.flops_per_second = seconds > 0 ? Flops(p) / seconds : 0;
  k.peak_fraction = dev.measured_copy_bandwidth > 0
                        ? k.bytes_per_second / dev.measured_copy_bandwidth
                        : 0;
  k.run = run;
  return k;
}

void FillReport(const Backend& backend, const Problem& p,
                const Selection& selection, const KernelObservation& k,
                v1::KernelReport* report) {
  const DeviceInfo& dev = backend.device();
  const RunResult& run = k.run;
  report->set_variant(std::string(selection.variant->name()));
  report->set_backend(std::string(BackendName(backend.kind())));
  report->set_device(dev.name);
  report->set_kernel_seconds(run.kernel_seconds);
  const double flops = Flops(p);
  const double intensity = k.bytes_moved > 0 ? flops / k.bytes_moved : 0;
  report->set_bytes_moved(k.bytes_moved);
  report->set_achieved_bytes_per_second(k.bytes_per_second);
  report->set_flops(flops);
  report->set_achieved_flops_per_second(k.flops_per_second);
  report->set_arithmetic_intensity(intensity);
  report->set_peak_bandwidth_fraction(k.peak_fraction);
  report->set_bound(Bound(p, dev, intensity));
  report->set_selection_source(selection.source);
  report->set_selection_reason(selection.reason);
  // CPU variants launch nothing; an all-zero launch would only mislead.
  if (run.launch.launches > 0) {
    v1::LaunchConfig* launch = report->mutable_launch();
    launch->mutable_grid()->Add(std::begin(run.launch.grid),
                                std::end(run.launch.grid));
    launch->mutable_block()->Add(std::begin(run.launch.block),
                                 std::end(run.launch.block));
    launch->set_shared_memory_bytes(run.launch.shared_memory_bytes);
    launch->set_registers_per_thread(run.launch.registers_per_thread);
    launch->set_theoretical_occupancy(run.launch.theoretical_occupancy);
    launch->set_waves(run.launch.waves);
  }
}

void FillDeviceInfo(const DeviceInfo& dev, v1::DeviceInfo* out) {
  out->set_name(dev.name);
  out->set_backend(std::string(BackendName(dev.backend)));
  out->set_compute_capability_major(dev.cc_major);
  out->set_compute_capability_minor(dev.cc_minor);
  out->set_multiprocessors(dev.multiprocessors);
  out->set_memory_bytes(dev.memory_bytes);
  out->set_l2_cache_bytes(dev.l2_cache_bytes);
  out->set_shared_memory_per_block_bytes(dev.shared_memory_per_block_bytes);
  out->set_theoretical_bandwidth_bytes_per_second(dev.theoretical_bandwidth);
  out->set_measured_copy_bytes_per_second(dev.measured_copy_bandwidth);
}

}  // namespace

// Reports one RPC to the metrics: started on construction, finished by Finish,
// which every return path of a handler goes through.
class TensorOpsService::Call {
 public:
  Call(ServiceMetrics* metrics, Rpc rpc)
      : metrics_(metrics), rpc_(rpc), start_(Clock::now()) {
    metrics_->RpcStarted(rpc_);
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  ServiceMetrics& metrics() { return *metrics_; }

  // The request leaves the service for the backend.
  void BackendStarted() {
    reached_backend_ = true;
    metrics_->BackendStarted(rpc_, SecondsSince(start_));
  }

  grpc::Status Finish(const absl::Status& status,
                      const google::protobuf::Message& request,
                      const google::protobuf::Message& response) {
    RpcOutcome outcome;
    outcome.rpc = rpc_;
    outcome.code = status.code();
    outcome.seconds = SecondsSince(start_);
    outcome.request_bytes = static_cast<int64_t>(request.ByteSizeLong());
    // gRPC sends no message with an error status.
    outcome.response_bytes =
        status.ok() ? static_cast<int64_t>(response.ByteSizeLong()) : 0;
    outcome.reached_backend = reached_backend_;
    metrics_->RpcFinished(outcome);
    return ToGrpcStatus(status);
  }

 private:
  ServiceMetrics* const metrics_;
  const Rpc rpc_;
  const Clock::time_point start_;
  bool reached_backend_ = false;
};

TensorOpsService::TensorOpsService(Backend* backend, ServerConfig config,
                                   std::string backend_reason,
                                   ServiceMetrics* metrics, Selector* selector)
    : backend_(backend),
      config_(std::move(config)),
      backend_reason_(std::move(backend_reason)),
      metrics_(metrics),
      selector_(selector) {}

void TensorOpsService::AttachHealth(grpc::HealthCheckServiceInterface* health) {
  health_.store(health);
  PublishHealth();
}

void TensorOpsService::PublishHealth() {
  grpc::HealthCheckServiceInterface* health = health_.load();
  if (health == nullptr) return;
  const absl::Status status = backend_->Health();
  if (!status.ok()) {
    spdlog::error("backend unhealthy, health checks report NOT_SERVING: {}",
                  status.ToString());
  }
  health->SetServingStatus("", status.ok());
  health->SetServingStatus(v1::TensorOps::service_full_name(), status.ok());
}

absl::Status TensorOpsService::Run(Call& call, const DecodedRequest& d,
                                   absl::Span<v1::Tensor* const> outputs,
                                   v1::KernelReport* report) {
  COALESCE_ASSIGN_OR_RETURN(const Selection selection,
                            selector_->Select(d.problem, d.forced_variant));
  call.metrics().VariantSelected(selection);
  Operands host = d.host;
  const v1::DataType dtype = ToProto(OutputDType(d.problem));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i] == nullptr) continue;
    v1::Tensor* out = outputs[i];
    out->set_dtype(dtype);
    out->mutable_shape()->Add(d.output_shapes[i].begin(),
                              d.output_shapes[i].end());
    // The kernel writes straight into the response's bytes: no copy after.
    std::string* raw = out->mutable_raw();
    raw->resize(d.sizes.outputs[i]);
    host.outputs[i] = raw->data();
  }
  RunResult run;
  call.BackendStarted();
  const absl::Status status =
      backend_->Execute(*selection.variant, d.problem, host, &run);
  if (!status.ok()) {
    PublishHealth();
    return status;
  }
  const KernelObservation kernel =
      Observe(backend_->device(), d.problem, *selection.variant, run);
  call.metrics().KernelRan(kernel);
  if (report != nullptr) {
    FillReport(*backend_, d.problem, selection, kernel, report);
  }
  return absl::OkStatus();
}

grpc::Status TensorOpsService::Transpose(grpc::ServerContext* /*context*/,
                                         const v1::TransposeRequest* request,
                                         v1::TransposeResponse* response) {
  Call call(metrics_, Rpc::kTranspose);
  const absl::StatusOr<DecodedRequest> d =
      DecodeTranspose(*request, config_.max_tensor_bytes);
  if (!d.ok()) return call.Finish(d.status(), *request, *response);
  return call.Finish(Run(call, *d, {response->mutable_output()},
                         d->report ? response->mutable_report() : nullptr),
                     *request, *response);
}

grpc::Status TensorOpsService::Gemm(grpc::ServerContext* /*context*/,
                                    const v1::GemmRequest* request,
                                    v1::GemmResponse* response) {
  Call call(metrics_, Rpc::kGemm);
  const absl::StatusOr<DecodedRequest> d =
      DecodeGemm(*request, config_.max_tensor_bytes);
  if (!d.ok()) return call.Finish(d.status(), *request, *response);
  return call.Finish(Run(call, *d, {response->mutable_d()},
                         d->report ? response->mutable_report() : nullptr),
                     *request, *response);
}

grpc::Status TensorOpsService::ConvertLayout(
    grpc::ServerContext* /*context*/, const v1::ConvertLayoutRequest* request,
    v1::ConvertLayoutResponse* response) {
  Call call(metrics_, Rpc::kConvertLayout);
  const absl::StatusOr<DecodedRequest> d =
      DecodeConvertLayout(*request, config_.max_tensor_bytes);
  if (!d.ok()) return call.Finish(d.status(), *request, *response);
  return call.Finish(Run(call, *d, {response->mutable_output()},
                         d->report ? response->mutable_report() : nullptr),
                     *request, *response);
}

grpc::Status TensorOpsService::GeluLayerNorm(
    grpc::ServerContext* /*context*/, const v1::GeluLayerNormRequest* request,
    v1::GeluLayerNormResponse* response) {
  Call call(metrics_, Rpc::kGeluLayerNorm);
  const absl::StatusOr<DecodedRequest> d =
      DecodeGeluLayerNorm(*request, config_.max_tensor_bytes);
  if (!d.ok()) return call.Finish(d.status(), *request, *response);
  v1::Tensor* h = d->sizes.outputs[kLnH] > 0 ? response->mutable_h() : nullptr;
  return call.Finish(Run(call, *d, {response->mutable_y(), h},
                         d->report ? response->mutable_report() : nullptr),
                     *request, *response);
}

grpc::Status TensorOpsService::GetServerInfo(
    grpc::ServerContext* /*context*/, const v1::GetServerInfoRequest* request,
    v1::GetServerInfoResponse* response) {
  Call call(metrics_, Rpc::kGetServerInfo);
  response->set_backend(std::string(BackendName(backend_->kind())));
  FillDeviceInfo(backend_->device(), response->add_devices());
  v1::BuildInfo* build = response->mutable_build();
  build->set_version(COALESCE_VERSION);
  build->set_git_sha(COALESCE_GIT_SHA);
  build->set_cuda_enabled(CudaBackendBuilt());
  build->set_cuda_architectures(COALESCE_CUDA_ARCHITECTURES);
  v1::Limits* limits = response->mutable_limits();
  limits->set_max_tensor_bytes(config_.max_tensor_bytes);
  limits->set_max_message_bytes(config_.max_message_bytes);
  limits->set_max_rank(kMaxRank);
  for (const KernelVariant* v : backend_->registry().All()) {
    v1::VariantInfo* info = response->add_variants();
    info->set_name(std::string(v->name()));
    info->set_op(std::string(OpName(v->op())));
    info->set_backend(std::string(BackendName(v->backend())));
    info->set_description(std::string(v->description()));
  }
  response->set_backend_reason(backend_reason_);
  return call.Finish(absl::OkStatus(), *request, *response);
}

grpc::Status TensorOpsService::ExplainSelection(
    grpc::ServerContext* /*context*/,
    const v1::ExplainSelectionRequest* request,
    v1::ExplainSelectionResponse* response) {
  Call call(metrics_, Rpc::kExplainSelection);
  const int64_t max = config_.max_tensor_bytes;
  absl::StatusOr<DecodedRequest> d;
  switch (request->request_case()) {
    case v1::ExplainSelectionRequest::kTranspose:
      d = DecodeTranspose(request->transpose(), max, /*shape_only=*/true);
      break;
    case v1::ExplainSelectionRequest::kGemm:
      d = DecodeGemm(request->gemm(), max, /*shape_only=*/true);
      break;
    case v1::ExplainSelectionRequest::kConvertLayout:
      d = DecodeConvertLayout(request->convert_layout(), max,
                              /*shape_only=*/true);
      break;
    case v1::ExplainSelectionRequest::kGeluLayerNorm:
      d = DecodeGeluLayerNorm(request->gelu_layer_norm(), max,
                              /*shape_only=*/true);
      break;
    default:
      d = absl::InvalidArgumentError(
          "request: set one of transpose, gemm, convert_layout, "
          "gelu_layer_norm");
  }
  if (!d.ok()) return call.Finish(d.status(), *request, *response);
  const Explanation e = selector_->Explain(d->problem);
  response->set_key(e.key);
  response->set_problem(Describe(d->problem));
  for (const Candidate& c : e.candidates) {
    v1::VariantCandidate* out = response->add_candidates();
    out->set_variant(c.variant);
    out->set_eligible(c.eligible);
    out->set_why_not(c.why_not);
    out->set_estimated_seconds(c.estimate_seconds);
    out->set_measured_seconds(c.measured_seconds);
  }
  if (e.chosen.variant == nullptr) {
    return call.Finish(absl::UnimplementedError(absl::StrCat(
                           "no ", BackendName(backend_->kind()),
                           " variant supports ", Describe(d->problem))),
                       *request, *response);
  }
  response->set_chosen_variant(std::string(e.chosen.variant->name()));
  response->set_source(e.chosen.source);
  response->set_reason(e.chosen.reason);
  return call.Finish(absl::OkStatus(), *request, *response);
}

}  // namespace coalesce
