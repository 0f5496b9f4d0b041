#include "server/frontend/native/service.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "kernels/backends.h"
#include "kernels/core/stacking.h"
#include "kernels/selection/heuristic.h"
#include "server/frontend/native/upload_framing.h"
#include "server/frontend/status.h"
#include "server/logging/log.h"
#include "spdlog/spdlog.h"

namespace coalesce {
namespace {

// Which roofline ceiling applies: compute when the arithmetic intensity is
// past the ridge point (peak FLOP/s over bandwidth).
std::string Bound(const Problem& p, const DeviceInfo& dev, double intensity) {
  const double bandwidth = RooflineBandwidth(dev);
  const double peak = RooflineFlops(p, dev);
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
  k.dtype = DTypeOf(p);
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

// batch_size: the requests the launch served (KernelReport.batch_size).
void FillReport(const Backend& backend, const Problem& p,
                const Selection& selection, const KernelObservation& k,
                int batch_size, v1::KernelReport* report) {
  const RunResult& run = k.run;
  const DeviceInfo& dev = backend.device_at(run.device);
  report->set_variant(std::string(selection.variant->name()));
  report->set_backend(std::string(BackendName(backend.kind())));
  report->set_device(dev.name);
  report->set_device_ordinal(dev.ordinal);
  report->set_placement(std::string(PlacementName(run.placement)));
  report->set_staged_bytes(run.staged_bytes);
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
  report->set_cold_start(run.launch.cold);
  report->set_graph_replayed(run.graph_replayed);
  report->set_batch_size(batch_size);
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

// OK while the call is wanted: CANCELLED once its client went away, its
// deadline passed or the server's shutdown grace ended. Checked before
// anything is allocated or launched for it.
absl::Status CheckWanted(const grpc::ServerContextBase& context) {
  if (context.IsCancelled()) {
    return absl::CancelledError(
        "the call was cancelled (deadline passed, client gone or server "
        "shutting down)");
  }
  return absl::OkStatus();
}

// Lets the tensor store cancel an upload stream from another thread (its
// idle sweeper, or a DeleteTensor of the upload) without touching a
// ServerContext that its handler has already left: the handler detaches
// before it returns.
class UploadCanceller {
 public:
  explicit UploadCanceller(grpc::ServerContextBase* context)
      : context_(context) {}
  void Cancel() {
    absl::MutexLock lock(&mu_);
    if (context_ != nullptr) context_->TryCancel();
  }
  void Detach() {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  grpc::ServerContextBase* context_ ABSL_GUARDED_BY(mu_);
};

// Prefixes a status's message with the field it concerns.
absl::Status InField(const absl::Status& status, absl::string_view field) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(field, ": ", status.message()));
}

void FillTensorInfo(const Backend& backend, const TensorListing& t,
                    v1::TensorInfo* out) {
  out->set_handle(t.handle);
  out->set_dtype(ToProtoDType(t.dtype));
  out->mutable_shape()->Add(t.shape.begin(), t.shape.end());
  out->set_byte_size(t.bytes);
  out->set_owner(t.owner);
  out->set_idle_seconds(t.idle_seconds);
  if (t.device < backend.device_count()) {
    out->set_device_ordinal(backend.device_at(t.device).ordinal);
  }
}

TensorListing ListingOf(const Backend& backend, const StoredTensor& t) {
  return {t.handle,
          t.owner,
          t.dtype,
          t.shape,
          t.bytes,
          0,
          std::max(0, backend.DeviceOfResident(t.data.get()))};
}

// The index of the serving device of this ordinal, or INVALID_ARGUMENT
// naming field and the ordinals served.
absl::StatusOr<int> DeviceIndexOf(const Backend& backend, int64_t ordinal,
                                  absl::string_view field) {
  const int index = backend.IndexOfOrdinal(ordinal);
  if (index >= 0) return index;
  std::vector<int> served;
  for (int i = 0; i < backend.device_count(); ++i) {
    served.push_back(backend.device_at(i).ordinal);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": ", ordinal, " is not a device this server runs on (",
      absl::StrJoin(served, ","), ")"));
}

// Room left in a GetTensor message for everything but the chunk.
constexpr int64_t kChunkMessageOverhead = 4096;

// health: OK, or why it does not serve; served: one of the devices this
// server runs requests on.
void FillDeviceInfo(const DeviceInfo& dev, bool served,
                    const absl::Status& health, v1::DeviceInfo* out) {
  out->set_ordinal(dev.ordinal);
  out->set_uuid(dev.uuid);
  out->set_serving(served);
  out->set_healthy(health.ok());
  out->set_health(health.ok() ? "" : std::string(health.message()));
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

TensorOpsService::TensorOpsService(Backend* backend, ServerConfig config,
                                   std::string backend_reason,
                                   ServiceMetrics* metrics, Selector* selector,
                                   TensorStore* tensors,
                                   SharedMemoryRegistry* shared_memory,
                                   const Authenticator* auth,
                                   std::vector<Scheduler*> schedulers)
    : backend_(backend),
      config_(std::move(config)),
      backend_reason_(std::move(backend_reason)),
      metrics_(metrics),
      selector_(selector),
      tensors_(tensors),
      shared_memory_(shared_memory),
      auth_(auth),
      schedulers_(std::move(schedulers)) {}

void TensorOpsService::AttachHealth(grpc::HealthCheckServiceInterface* health,
                                    std::vector<std::string> also) {
  health_services_ = std::move(also);
  health_services_.emplace_back("");
  health_services_.emplace_back(v1::TensorOps::service_full_name());
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
  for (const std::string& service : health_services_) {
    health->SetServingStatus(service, status.ok());
  }
}

absl::Status TensorOpsService::PlaceOutputs(
    const Caller& caller, const DecodedRequest& d, int device,
    absl::Span<v1::Tensor* const> outputs, Operands& operands,
    absl::InlinedVector<std::string, 2>& created) {
  operands.output_spaces.assign(outputs.size(), MemorySpace::kHost);
  const DType dtype = DTypeOf(d.problem);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i] == nullptr) continue;
    v1::Tensor* out = outputs[i];
    out->Clear();  // placed afresh when a batch falls back to running alone
    out->set_dtype(ToProtoDType(dtype));
    out->mutable_shape()->Add(d.output_shapes[i].begin(),
                              d.output_shapes[i].end());
    const OutputTarget& target = d.output_targets[i];
    switch (target.placement) {
      case v1::OUTPUT_PLACEMENT_SERVER_HANDLE: {
        if (target.stored != nullptr) {
          // An existing tensor of the caller's, resolved and checked by the
          // codec (operands.outputs[i] points at its bytes).
          out->set_handle(target.handle);
          operands.output_spaces[i] = MemorySpace::kResident;
          break;
        }
        // The kernel writes straight into the stored tensor, in the
        // backend's resident memory (device memory on a GPU): no copy after.
        // On the device that runs the op (a server of several).
        CreateOptions create;
        if (backend_->device_count() > 1) create.device = device;
        absl::StatusOr<std::shared_ptr<StoredTensor>> t =
            tensors_->Create(caller.identity, "", dtype, d.output_shapes[i],
                             d.sizes.outputs[i], std::move(create));
        if (!t.ok()) {
          Abandon(caller, created);
          return InField(t.status(), absl::StrCat("options.outputs[", i, "]"));
        }
        created.push_back((*t)->handle);
        out->set_handle((*t)->handle);
        operands.outputs[i] = (*t)->data.get();
        operands.output_spaces[i] = MemorySpace::kResident;
        break;
      }
      case v1::OUTPUT_PLACEMENT_SHARED_MEMORY:
        // The codec resolved and bounds-checked it: operands.outputs[i] is
        // set (host memory, or device memory for a CUDA region).
        *out->mutable_shared_memory() = target.shared_memory;
        if (target.on_device) {
          operands.output_spaces[i] = MemorySpace::kResident;
        }
        break;
      default: {
        // The kernel writes straight into the response's bytes: no copy
        // after.
        std::string* raw = out->mutable_raw();
        raw->resize(d.sizes.outputs[i]);
        operands.outputs[i] = raw->data();
      }
    }
  }
  return absl::OkStatus();
}

void TensorOpsService::Abandon(const Caller& caller,
                               absl::Span<const std::string> created) {
  for (const std::string& handle : created) {
    tensors_->Delete(caller.identity, handle).IgnoreError();
  }
}

absl::Status TensorOpsService::Settle(const Caller& caller,
                                      const DecodedRequest& d,
                                      absl::Span<const std::string> created) {
  // A region its client shrank during the kernel read zeros for the lost
  // pages (mapping_guard.h): the result is not the op's.
  for (const auto& region : d.shared_memory) {
    if (absl::Status alive = region->CheckAlive(); !alive.ok()) {
      Abandon(caller, created);
      return alive;
    }
  }
  for (const std::string& handle : created) {
    COALESCE_RETURN_IF_ERROR(tensors_->Commit(caller.identity, handle));
  }
  return absl::OkStatus();
}

absl::Status TensorOpsService::Run(Call& call, grpc::ServerContextBase& context,
                                   const Caller& caller,
                                   const DecodedRequest& d, int device,
                                   absl::Span<v1::Tensor* const> outputs,
                                   v1::KernelReport* report) {
  COALESCE_RETURN_IF_ERROR(CheckWanted(context));
  SelectContext select;
  select.may_tune = caller.role == Role::kAdmin;
  select.cancelled = [&context] { return context.IsCancelled(); };
  COALESCE_ASSIGN_OR_RETURN(
      const Selection selection,
      selector_->Select(d.problem, d.forced_variant, select));
  call.metrics().VariantSelected(selection);
  Operands operands = d.operands;
  // Outputs kept as handles: committed only when the kernel succeeded.
  absl::InlinedVector<std::string, 2> created;
  COALESCE_RETURN_IF_ERROR(
      PlaceOutputs(caller, d, device, outputs, operands, created));
  if (absl::Status wanted = CheckWanted(context); !wanted.ok()) {
    Abandon(caller, created);
    return wanted;
  }
  RunResult run;
  call.BackendStarted();
  const absl::Status status = backend_->ExecuteOn(device, *selection.variant,
                                                  d.problem, operands, &run);
  call.Launched(run);
  if (!status.ok()) {
    Abandon(caller, created);
    PublishHealth();
    return status;
  }
  COALESCE_RETURN_IF_ERROR(Settle(caller, d, created));
  const KernelObservation kernel =
      LaunchDone(call, d.problem, *selection.variant, run, 1);
  if (report != nullptr) {
    FillReport(*backend_, d.problem, selection, kernel, 1, report);
  }
  return absl::OkStatus();
}

KernelObservation TensorOpsService::LaunchDone(Call& call, const Problem& p,
                                               const KernelVariant& variant,
                                               const RunResult& run,
                                               int requests) {
  const KernelObservation kernel =
      Observe(backend_->device_at(run.device), p, variant, run);
  // A cold run's time includes module loading or plan building: the report
  // says so, the kernel metrics keep only the kernel's own figures.
  if (!run.launch.cold) call.metrics().KernelRan(kernel);
  call.metrics().LaunchServed(OpOf(p), requests);
  return kernel;
}

grpc::ServerUnaryReactor* TensorOpsService::Answer(
    grpc::CallbackServerContext* context, grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

// One op call from its handler to its reactor's Finish: shared by the
// scheduler job's run, run_batch and reject, of which exactly one finishes
// it.
struct TensorOpsService::OpState {
  OpState(ServiceMetrics* metrics, Rpc rpc,
          const grpc::ServerContextBase& context)
      : call(metrics, rpc, context) {}
  Call call;
  Caller caller;
  DecodedRequest d;
  OpSlots slots;
  int device = 0;  // the index of the device whose scheduler runs it
  grpc::CallbackServerContext* context = nullptr;
  // Ends the call: the RPC's reactor, or another front end's continuation.
  std::function<void(grpc::Status)> done;
  const google::protobuf::Message* request = nullptr;
  google::protobuf::Message* response = nullptr;

  void Finish(const absl::Status& status) {
    grpc::Status answer = call.Finish(status, *request, *response);
    // The stored tensors and regions the request held are let go before
    // the client can see the answer (and, say, delete one and list).
    d = DecodedRequest();
    done(std::move(answer));
  }
};

std::string TensorOpsService::BatchKey(const DecodedRequest& d) const {
  const OpKind op = OpOf(d.problem);
  if (!absl::c_linear_search(*config_.batch_ops, op)) return "";
  const std::optional<StackInfo> info = StackInfoOf(d.problem);
  if (!info.has_value()) return "";
  if (config_.batch_host_inputs_only) {
    for (size_t i = 0; i < info->input_stacked.size(); ++i) {
      if (info->input_stacked[i] &&
          d.operands.input_space(i) == MemorySpace::kResident) {
        return "";
      }
    }
  }
  std::string key = absl::StrCat(info->key, "|", d.forced_variant);
  // Shared inputs must be the same in every request of a batch: the same
  // stored tensor, or equal bytes (the hash only sorts; RunBatch compares
  // the bytes).
  for (size_t i = 0; i < info->input_stacked.size(); ++i) {
    if (info->input_stacked[i] || d.sizes.inputs[i] == 0) continue;
    const void* p = d.operands.inputs[i];
    if (d.operands.input_space(i) == MemorySpace::kResident) {
      absl::StrAppend(&key, "|r", reinterpret_cast<uintptr_t>(p));
    } else {
      absl::StrAppend(&key, "|h",
                      absl::HashOf(absl::string_view(
                          static_cast<const char*>(p), d.sizes.inputs[i])));
    }
  }
  return key;
}

namespace {

// Each op's RPC, decoder and response outputs (in the decoded problem's
// output order; null for one not asked for), for RunOp.
template <typename Request>
struct OpTraits;

template <>
struct OpTraits<v1::TransposeRequest> {
  using Response = v1::TransposeResponse;
  static constexpr Rpc kRpc = Rpc::kTranspose;
  static constexpr auto kDecode = &DecodeTranspose;
  static absl::InlinedVector<v1::Tensor*, 2> Outputs(const DecodedRequest&,
                                                     Response* r) {
    return {r->mutable_output()};
  }
};

template <>
struct OpTraits<v1::GemmRequest> {
  using Response = v1::GemmResponse;
  static constexpr Rpc kRpc = Rpc::kGemm;
  static constexpr auto kDecode = &DecodeGemm;
  static absl::InlinedVector<v1::Tensor*, 2> Outputs(const DecodedRequest&,
                                                     Response* r) {
    return {r->mutable_d()};
  }
};

template <>
struct OpTraits<v1::ConvertLayoutRequest> {
  using Response = v1::ConvertLayoutResponse;
  static constexpr Rpc kRpc = Rpc::kConvertLayout;
  static constexpr auto kDecode = &DecodeConvertLayout;
  static absl::InlinedVector<v1::Tensor*, 2> Outputs(const DecodedRequest&,
                                                     Response* r) {
    return {r->mutable_output()};
  }
};

template <>
struct OpTraits<v1::GeluLayerNormRequest> {
  using Response = v1::GeluLayerNormResponse;
  static constexpr Rpc kRpc = Rpc::kGeluLayerNorm;
  static constexpr auto kDecode = &DecodeGeluLayerNorm;
  static absl::InlinedVector<v1::Tensor*, 2> Outputs(const DecodedRequest& d,
                                                     Response* r) {
    return {r->mutable_y(),
            d.sizes.outputs[kLnH] > 0 ? r->mutable_h() : nullptr};
  }
};

}  // namespace

template <typename Request, typename Response>
void TensorOpsService::RunOp(grpc::CallbackServerContext* context,
                             absl::StatusOr<Caller> caller,
                             const Request* request, Response* response,
                             std::function<void(grpc::Status)> done) {
  using Traits = OpTraits<Request>;
  static_assert(std::is_same_v<Response, typename Traits::Response>);
  SubmitOp(
      context, Traits::kRpc, std::move(caller), request, response,
      [&](const DataPlane& plane) {
        return Traits::kDecode(*request, config_.max_tensor_bytes,
                               /*shape_only=*/false, plane);
      },
      [response](const DecodedRequest& d) {
        return OpSlots{Traits::Outputs(d, response),
                       d.report ? response->mutable_report() : nullptr};
      },
      std::move(done));
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* TensorOpsService::StartOp(
    grpc::CallbackServerContext* context, const Request* request,
    Response* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RunOp(context, auth_->Authenticate(*context), request, response,
        [reactor](grpc::Status status) { reactor->Finish(std::move(status)); });
  return reactor;
}

void TensorOpsService::RunTranspose(grpc::CallbackServerContext* context,
                                    absl::StatusOr<Caller> caller,
                                    const v1::TransposeRequest* request,
                                    v1::TransposeResponse* response,
                                    std::function<void(grpc::Status)> done) {
  RunOp(context, std::move(caller), request, response, std::move(done));
}

void TensorOpsService::RunGemm(grpc::CallbackServerContext* context,
                               absl::StatusOr<Caller> caller,
                               const v1::GemmRequest* request,
                               v1::GemmResponse* response,
                               std::function<void(grpc::Status)> done) {
  RunOp(context, std::move(caller), request, response, std::move(done));
}

void TensorOpsService::RunConvertLayout(
    grpc::CallbackServerContext* context, absl::StatusOr<Caller> caller,
    const v1::ConvertLayoutRequest* request,
    v1::ConvertLayoutResponse* response,
    std::function<void(grpc::Status)> done) {
  RunOp(context, std::move(caller), request, response, std::move(done));
}

void TensorOpsService::RunGeluLayerNorm(
    grpc::CallbackServerContext* context, absl::StatusOr<Caller> caller,
    const v1::GeluLayerNormRequest* request,
    v1::GeluLayerNormResponse* response,
    std::function<void(grpc::Status)> done) {
  RunOp(context, std::move(caller), request, response, std::move(done));
}

void TensorOpsService::SubmitOp(
    grpc::CallbackServerContext* context, Rpc rpc,
    absl::StatusOr<Caller> caller, const google::protobuf::Message* request,
    google::protobuf::Message* response,
    absl::FunctionRef<absl::StatusOr<DecodedRequest>(const DataPlane&)> decode,
    absl::FunctionRef<OpSlots(const DecodedRequest&)> slots,
    std::function<void(grpc::Status)> done) {
  auto state = std::make_shared<OpState>(metrics_, rpc, *context);
  state->context = context;
  state->done = std::move(done);
  state->request = request;
  state->response = response;
  if (!caller.ok()) {
    state->Finish(caller.status());
    return;
  }
  state->caller = *std::move(caller);
  // Decoding and validation run here, on gRPC's thread: a bad request is
  // answered without waiting in the queue.
  absl::StatusOr<DecodedRequest> d = decode(plane(state->caller));
  if (!d.ok()) {
    state->Finish(d.status());
    return;
  }
  state->d = *std::move(d);
  state->slots = slots(state->d);
  Job job;
  job.identity = state->caller.identity;
  // What a waiting request holds: its message (inline tensors included).
  job.bytes = static_cast<int64_t>(request->ByteSizeLong());
  job.cancelled = [context] { return context->IsCancelled(); };
  job.batch_key = BatchKey(state->d);
  if (!job.batch_key.empty()) {
    job.batch_bytes = MinBytesMoved(state->d.problem);
    job.batch_item = state;
    job.run_batch = [this](std::vector<Job> batch, std::vector<double>) {
      RunBatch(std::move(batch));
    };
  }
  job.run = [this, state](double) {
    // What the run logs (a device fault) is about this request.
    RequestLogScope scope(state->call.request_id());
    state->Finish(Run(state->call, *state->context, state->caller, state->d,
                      state->device, state->slots.outputs,
                      state->slots.report));
  };
  job.reject = [state](absl::Status why) { state->Finish(why); };
  // Full: RESOURCE_EXHAUSTED at once, saying so; shutting down:
  // UNAVAILABLE.
  state->device = PickDevice(&state->d);
  const RooflineSeconds bound =
      Roofline(state->d.problem, backend_->device_at(state->device));
  job.seconds = std::max(bound.memory, bound.math);
  job.may_run_directly = MinBytesMoved(state->d.problem) <=
                         config_.direct_run_max_bytes.value_or(0);
  const absl::Status admitted =
      schedulers_[state->device]->Submit(std::move(job));
  if (!admitted.ok()) state->Finish(admitted);
}

int TensorOpsService::PickDevice(const DecodedRequest* d) const {
  if (schedulers_.size() <= 1) return 0;
  if (d != nullptr) {
    const int home = backend_->ResidentHome(d->problem, d->operands);
    if (home >= 0) return home;
  }
  int best = -1;
  double best_seconds = 0;
  int64_t best_jobs = 0;
  for (int i = 0; i < static_cast<int>(schedulers_.size()); ++i) {
    if (!backend_->HealthOf(i).ok()) continue;
    const Scheduler::Stats s = schedulers_[i]->stats();
    const int64_t jobs = s.queued + s.in_flight;
    if (best < 0 || s.outstanding_seconds < best_seconds ||
        (s.outstanding_seconds == best_seconds && jobs < best_jobs)) {
      best = i;
      best_seconds = s.outstanding_seconds;
      best_jobs = jobs;
    }
  }
  // None healthy: the run fails on device 0, naming the fault.
  return std::max(best, 0);
}

namespace {

// Whether b's shared inputs (stacking.h) are a's: the same resident tensor,
// or host bytes that compare equal.
bool SameSharedInputs(const DecodedRequest& a, const DecodedRequest& b) {
  const std::optional<StackInfo> info = StackInfoOf(a.problem);
  for (size_t i = 0; i < info->input_stacked.size(); ++i) {
    if (info->input_stacked[i]) continue;
    if (a.sizes.inputs[i] != b.sizes.inputs[i] ||
        a.operands.input_space(i) != b.operands.input_space(i)) {
      return false;
    }
    if (a.sizes.inputs[i] == 0 ||
        a.operands.inputs[i] == b.operands.inputs[i]) {
      continue;
    }
    if (a.operands.input_space(i) == MemorySpace::kResident ||
        std::memcmp(a.operands.inputs[i], b.operands.inputs[i],
                    a.sizes.inputs[i]) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

void TensorOpsService::RunBatch(std::vector<Job> jobs) {
  std::vector<std::shared_ptr<OpState>> batch, alone;
  for (Job& job : jobs) {
    auto state = std::static_pointer_cast<OpState>(job.batch_item);
    if (absl::Status wanted = CheckWanted(*state->context); !wanted.ok()) {
      state->Finish(wanted);
    } else if (!batch.empty() && !SameSharedInputs(batch[0]->d, state->d)) {
      alone.push_back(std::move(state));
    } else {
      batch.push_back(std::move(state));
    }
  }
  jobs.clear();
  if (batch.size() > 1 && RunStacked(batch)) batch.clear();
  // What could not run stacked runs as it would have alone.
  for (auto* group : {&batch, &alone}) {
    for (const std::shared_ptr<OpState>& state : *group) {
      state->Finish(Run(state->call, *state->context, state->caller, state->d,
                        state->device, state->slots.outputs,
                        state->slots.report));
    }
  }
}

bool TensorOpsService::RunStacked(
    std::vector<std::shared_ptr<OpState>>& batch) {
  // Selection is the launch's: the stacked problem's, never tuned here
  // (tuning a shape that only batching makes would time the batch, not the
  // callers' requests).
  std::vector<Problem> parts;
  for (const auto& state : batch) parts.push_back(state->d.problem);
  Problem merged = Stacked(parts);
  SelectContext select;
  select.may_tune = false;
  const absl::StatusOr<Selection> selection =
      selector_->Select(merged, batch[0]->d.forced_variant, select);
  if (!selection.ok()) return false;
  // Outputs placed per request; one that cannot be placed fails alone.
  struct Placed {
    std::shared_ptr<OpState> state;
    Operands operands;
    absl::InlinedVector<std::string, 2> created;
  };
  std::vector<Placed> placed;
  for (std::shared_ptr<OpState>& state : batch) {
    Placed p{state, state->d.operands, {}};
    absl::Status s = PlaceOutputs(state->caller, state->d, state->device,
                                  state->slots.outputs, p.operands, p.created);
    if (!s.ok()) {
      state->Finish(s);
      continue;
    }
    placed.push_back(std::move(p));
  }
  batch.clear();
  if (placed.empty()) return true;
  std::vector<Operands> operands;
  parts.clear();
  for (Placed& p : placed) {
    parts.push_back(p.state->d.problem);
    operands.push_back(p.operands);
  }
  merged = Stacked(parts);
  const KernelVariant& variant = *selection->variant;
  if (!variant.CanImplement(merged, backend_->device()).ok()) {
    // Smaller than selected for (a placement failed): alone after all.
    for (Placed& p : placed) {
      Abandon(p.state->caller, p.created);
      batch.push_back(std::move(p.state));
    }
    return false;
  }
  for (Placed& p : placed) {
    p.state->call.metrics().VariantSelected(*selection);
    p.state->call.BackendStarted();
  }
  RunResult run;
  const absl::Status status = backend_->ExecuteStackedOn(
      placed[0].state->device, variant, merged, parts, operands, &run);
  for (Placed& p : placed) p.state->call.Launched(run);
  if (!status.ok()) {
    for (Placed& p : placed) {
      Abandon(p.state->caller, p.created);
      p.state->Finish(status);
    }
    PublishHealth();
    return true;
  }
  const int requests = static_cast<int>(placed.size());
  const KernelObservation kernel =
      LaunchDone(placed[0].state->call, merged, variant, run, requests);
  for (Placed& p : placed) {
    OpState& state = *p.state;
    absl::Status s = Settle(state.caller, state.d, p.created);
    if (s.ok() && state.slots.report != nullptr) {
      FillReport(*backend_, merged, *selection, kernel, requests,
                 state.slots.report);
    }
    state.Finish(s);
  }
  return true;
}

grpc::ServerUnaryReactor* TensorOpsService::Transpose(
    grpc::CallbackServerContext* context, const v1::TransposeRequest* request,
    v1::TransposeResponse* response) {
  return StartOp(context, request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::Gemm(
    grpc::CallbackServerContext* context, const v1::GemmRequest* request,
    v1::GemmResponse* response) {
  return StartOp(context, request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::ConvertLayout(
    grpc::CallbackServerContext* context,
    const v1::ConvertLayoutRequest* request,
    v1::ConvertLayoutResponse* response) {
  return StartOp(context, request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::GeluLayerNorm(
    grpc::CallbackServerContext* context,
    const v1::GeluLayerNormRequest* request,
    v1::GeluLayerNormResponse* response) {
  return StartOp(context, request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::GetServerInfo(
    grpc::CallbackServerContext* context,
    const v1::GetServerInfoRequest* request,
    v1::GetServerInfoResponse* response) {
  return Answer(context, [&]() -> grpc::Status {
    Call call(metrics_, Rpc::kGetServerInfo, *context);
    const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
    if (!caller.ok()) return call.Finish(caller.status(), *request, *response);
    response->set_backend(std::string(BackendName(backend_->kind())));
    const std::vector<DeviceInfo> devices = backend_->VisibleDevices();
    for (size_t i = 0; i < devices.size(); ++i) {
      const bool served = static_cast<int>(i) < backend_->device_count();
      FillDeviceInfo(
          devices[i], served,
          served ? backend_->HealthOf(static_cast<int>(i)) : absl::OkStatus(),
          response->add_devices());
    }
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
  }());
}

grpc::ServerUnaryReactor* TensorOpsService::ExplainSelection(
    grpc::CallbackServerContext* context,
    const v1::ExplainSelectionRequest* request,
    v1::ExplainSelectionResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Shared by this handler and, for measure, the job that times the
  // variants on the scheduler's thread.
  auto call =
      std::make_shared<Call>(metrics_, Rpc::kExplainSelection, *context);
  const auto finish = [call, reactor, request, response](absl::Status s) {
    reactor->Finish(call->Finish(s, *request, *response));
  };
  const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
  if (!caller.ok()) {
    finish(caller.status());
    return reactor;
  }
  if (request->measure()) {
    // Timing every variant spends GPU time on the server's behalf.
    const absl::Status allowed =
        Authorize(*caller, Role::kAdmin, "ExplainSelection.measure");
    if (!allowed.ok()) {
      finish(allowed);
      return reactor;
    }
  }
  const int64_t max = config_.max_tensor_bytes;
  absl::StatusOr<DecodedRequest> d;
  switch (request->request_case()) {
    case v1::ExplainSelectionRequest::kTranspose:
      d = DecodeTranspose(request->transpose(), max, /*shape_only=*/true,
                          plane(*caller));
      break;
    case v1::ExplainSelectionRequest::kGemm:
      d = DecodeGemm(request->gemm(), max, /*shape_only=*/true, plane(*caller));
      break;
    case v1::ExplainSelectionRequest::kConvertLayout:
      d = DecodeConvertLayout(request->convert_layout(), max,
                              /*shape_only=*/true, plane(*caller));
      break;
    case v1::ExplainSelectionRequest::kGeluLayerNorm:
      d = DecodeGeluLayerNorm(request->gelu_layer_norm(), max,
                              /*shape_only=*/true, plane(*caller));
      break;
    default:
      d = absl::InvalidArgumentError(
          "request: set one of transpose, gemm, convert_layout, "
          "gelu_layer_norm");
  }
  if (!d.ok()) {
    finish(d.status());
    return reactor;
  }
  auto explain = [this, context, request, response,
                  problem = d->problem]() -> absl::Status {
    Explanation e = selector_->Explain(problem);
    if (request->measure()) {
      // Asked between runs: the timing stops once the caller's deadline
      // passes, it goes away, or the server's shutdown grace ends.
      COALESCE_ASSIGN_OR_RETURN(TunedChoice m,
                                selector_->Measure(problem, [context] {
                                  return context->IsCancelled();
                                }));
      for (Candidate& c : e.candidates) {
        c.measured_seconds = -1;
        for (const auto& [name, seconds] : m.measured) {
          if (name == c.variant) c.measured_seconds = seconds;
        }
      }
    }
    response->set_key(e.key);
    response->set_problem(Describe(problem));
    for (const Candidate& c : e.candidates) {
      v1::VariantCandidate* out = response->add_candidates();
      out->set_variant(c.variant);
      out->set_eligible(c.eligible);
      out->set_why_not(c.why_not);
      out->set_estimated_seconds(c.estimate_seconds);
      out->set_measured_seconds(c.measured_seconds);
    }
    if (e.chosen.variant == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat("no ", BackendName(backend_->kind()),
                       " variant supports ", Describe(problem)));
    }
    response->set_chosen_variant(std::string(e.chosen.variant->name()));
    response->set_source(e.chosen.source);
    response->set_reason(e.chosen.reason);
    return absl::OkStatus();
  };
  if (!request->measure()) {
    finish(explain());
    return reactor;
  }
  // Measuring runs on the device: it waits its turn like an op.
  Job job;
  job.identity = caller->identity;
  job.bytes = static_cast<int64_t>(request->ByteSizeLong());
  job.cancelled = [context] { return context->IsCancelled(); };
  job.run = [finish, explain](double) mutable { finish(explain()); };
  job.reject = [finish](absl::Status why) mutable { finish(why); };
  const absl::Status admitted =
      schedulers_[PickDevice(nullptr)]->Submit(std::move(job));
  if (!admitted.ok()) finish(admitted);
  return reactor;
}

grpc::ServerUnaryReactor* TensorOpsService::Echo(
    grpc::CallbackServerContext* context, const v1::EchoRequest* request,
    v1::EchoResponse* response) {
  return Answer(context, [&]() -> grpc::Status {
    Call call(metrics_, Rpc::kEcho, *context);
    // Authenticated like an op: the floor an op is compared with includes it.
    const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
    if (!caller.ok()) return call.Finish(caller.status(), *request, *response);
    // One copy into the response, as an op writes its output into one.
    *response->mutable_payload() = request->payload();
    return call.Finish(absl::OkStatus(), *request, *response);
  }());
}

// PutTensor: the header reserves the tensor, each chunk is copied in as it
// arrives (its copy to the device runs while the next one is read), and
// the end of the stream commits it. Reactions of one call never overlap.
class TensorOpsService::PutTensorReactor final
    : public grpc::ServerReadReactor<v1::PutTensorRequest> {
 public:
  PutTensorReactor(TensorOpsService* service,
                   grpc::CallbackServerContext* context,
                   v1::PutTensorResponse* response)
      : service_(service),
        context_(context),
        response_(response),
        call_(service->metrics_, Rpc::kPutTensor, *context),
        canceller_(std::make_shared<UploadCanceller>(context)) {
    absl::StatusOr<Caller> caller = service_->auth_->Authenticate(*context_);
    if (!caller.ok()) {
      End(caller.status());
      return;
    }
    caller_ = *std::move(caller);
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed, or the call was cancelled.
      End(Complete());
      return;
    }
    request_bytes_ += static_cast<int64_t>(message_.ByteSizeLong());
    const absl::Status status = tensor_ == nullptr ? Begin() : Receive();
    if (!status.ok()) {
      End(status);
      return;
    }
    StartRead(&message_);
  }

  void OnDone() override { delete this; }

 private:
  // The header: quota, cap, name and the upload limit are checked before
  // any chunk is accepted; the declared size stays reserved until the
  // memory is freed.
  absl::Status Begin() {
    COALESCE_ASSIGN_OR_RETURN(header_, framing_.Start(message_));
    COALESCE_RETURN_IF_ERROR(CheckWanted(*context_));
    CreateOptions create;
    create.upload = true;
    create.on_abandon = [canceller = canceller_] { canceller->Cancel(); };
    if (message_.header().has_device_ordinal()) {
      COALESCE_ASSIGN_OR_RETURN(
          create.device,
          DeviceIndexOf(*service_->backend_, message_.header().device_ordinal(),
                        "header.device_ordinal"));
    }
    COALESCE_ASSIGN_OR_RETURN(
        tensor_, service_->tensors_->Create(
                     caller_.identity, message_.header().name(), header_.dtype,
                     header_.shape, header_.bytes, std::move(create)));
    writer_ = service_->tensors_->memory().OpenWriter(tensor_->data.get(),
                                                      header_.bytes);
    return absl::OkStatus();
  }

  absl::Status Receive() {
    COALESCE_RETURN_IF_ERROR(Abandoned());
    COALESCE_ASSIGN_OR_RETURN(const UploadFraming::Piece piece,
                              framing_.Next(message_));
    COALESCE_RETURN_IF_ERROR(
        service_->tensors_->Touch(caller_.identity, tensor_->handle));
    const absl::Status copied =
        writer_->Write(piece.offset, piece.bytes.data(),
                       static_cast<int64_t>(piece.bytes.size()));
    if (!copied.ok()) {
      service_->PublishHealth();  // a device fault makes the server unhealthy
      return InField(copied, absl::StrCat("chunk: message ", piece.message));
    }
    return absl::OkStatus();
  }

  // The stream ended: every chunk in place before the handle becomes
  // usable.
  absl::Status Complete() {
    if (tensor_ == nullptr) {
      COALESCE_RETURN_IF_ERROR(CheckWanted(*context_));
      return absl::InvalidArgumentError(
          "header: the stream ended before its first message");
    }
    COALESCE_RETURN_IF_ERROR(Abandoned());
    COALESCE_RETURN_IF_ERROR(CheckWanted(*context_));
    COALESCE_RETURN_IF_ERROR(framing_.Finish());
    const absl::Status finished = writer_->Finish();
    if (!finished.ok()) {
      service_->PublishHealth();
      return InField(finished,
                     absl::StrCat("chunk: messages 1 to ", framing_.chunks()));
    }
    COALESCE_RETURN_IF_ERROR(
        service_->tensors_->Commit(caller_.identity, tensor_->handle));
    FillTensorInfo(*service_->backend_,
                   ListingOf(*service_->backend_, *tensor_),
                   response_->mutable_tensor());
    return absl::OkStatus();
  }

  absl::Status Abandoned() const {
    if (!tensor_->abandoned()) return absl::OkStatus();
    return absl::AbortedError(
        absl::StrCat("upload of ", Quoted(tensor_->handle),
                     " ended: the tensor was deleted, or no chunk arrived for "
                     "--upload_idle_timeout_s"));
  }

  // Finishes the call once. On an error the upload is freed: the writer
  // waits for its copies first; the handler's own status goes back, not
  // the cancellation that deleting an upload asks for.
  void End(const absl::Status& status) {
    canceller_->Detach();
    writer_.reset();
    if (!status.ok() && tensor_ != nullptr) {
      service_->tensors_->Delete(caller_.identity, tensor_->handle)
          .IgnoreError();
    }
    // The store frees an upload's bytes (and stops charging them) when the
    // last reference goes: ours goes before the client sees the answer.
    tensor_.reset();
    Finish(call_.Finish(
        status, request_bytes_,
        status.ok() ? static_cast<int64_t>(response_->ByteSizeLong()) : 0));
  }

  TensorOpsService* const service_;
  grpc::CallbackServerContext* const context_;
  v1::PutTensorResponse* const response_;
  Call call_;
  // Shared with the store's on_abandon, which may outlive this call.
  const std::shared_ptr<UploadCanceller> canceller_;
  Caller caller_;
  v1::PutTensorRequest message_;
  int64_t request_bytes_ = 0;
  UploadFraming framing_;
  TensorHeader header_;
  std::shared_ptr<StoredTensor> tensor_;  // null until the header
  std::unique_ptr<ResidentWriter> writer_;
};

grpc::ServerReadReactor<v1::PutTensorRequest>* TensorOpsService::PutTensor(
    grpc::CallbackServerContext* context, v1::PutTensorResponse* response) {
  return new PutTensorReactor(this, context, response);
}

// GetTensor: one chunk is copied out of the tensor and written at a time;
// the next is copied when the last write is done.
class TensorOpsService::GetTensorReactor final
    : public grpc::ServerWriteReactor<v1::GetTensorResponse> {
 public:
  GetTensorReactor(TensorOpsService* service,
                   grpc::CallbackServerContext* context,
                   const v1::GetTensorRequest* request)
      : service_(service),
        context_(context),
        request_(request),
        call_(service->metrics_, Rpc::kGetTensor, *context) {
    const absl::Status status = Begin();
    if (!status.ok()) {
      End(status);
      return;
    }
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(absl::CancelledError("the client stopped reading"));
      return;
    }
    message_.clear_tensor();
    Next();
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Begin() {
    COALESCE_ASSIGN_OR_RETURN(const Caller caller,
                              service_->auth_->Authenticate(*context_));
    COALESCE_ASSIGN_OR_RETURN(
        chunk_bytes_,
        DecodeChunkBytes(
            request_->chunk_bytes(), kDefaultChunkBytes,
            service_->config_.max_message_bytes - kChunkMessageOverhead));
    absl::StatusOr<std::shared_ptr<const StoredTensor>> t =
        service_->tensors_->Find(caller.identity, request_->handle());
    if (!t.ok()) return InField(t.status(), "handle");
    tensor_ = *std::move(t);
    FillTensorInfo(*service_->backend_,
                   ListingOf(*service_->backend_, *tensor_),
                   message_.mutable_tensor());
    return absl::OkStatus();
  }

  // Writes the next chunk, or finishes after the last.
  void Next() {
    if (offset_ >= tensor_->bytes) {
      End(absl::OkStatus());
      return;
    }
    if (absl::Status wanted = CheckWanted(*context_); !wanted.ok()) {
      End(wanted);
      return;
    }
    const int64_t size = std::min(chunk_bytes_, tensor_->bytes - offset_);
    std::string* chunk = message_.mutable_chunk();
    chunk->resize(size);
    const absl::Status copied = service_->tensors_->memory().CopyOut(
        tensor_->data.get(), tensor_->bytes, offset_, chunk->data(), size);
    if (!copied.ok()) {
      service_->PublishHealth();  // a device fault makes the server unhealthy
      End(InField(copied, "handle"));
      return;
    }
    offset_ += size;
    response_bytes_ += static_cast<int64_t>(message_.ByteSizeLong());
    StartWrite(&message_);
  }

  void End(const absl::Status& status) {
    tensor_.reset();  // as PutTensor's: let go before the client can see
    Finish(call_.Finish(status, static_cast<int64_t>(request_->ByteSizeLong()),
                        response_bytes_));
  }

  TensorOpsService* const service_;
  grpc::CallbackServerContext* const context_;
  const v1::GetTensorRequest* const request_;
  Call call_;
  int64_t chunk_bytes_ = 0;
  std::shared_ptr<const StoredTensor> tensor_;
  v1::GetTensorResponse message_;
  int64_t offset_ = 0;
  int64_t response_bytes_ = 0;
};

grpc::ServerWriteReactor<v1::GetTensorResponse>* TensorOpsService::GetTensor(
    grpc::CallbackServerContext* context, const v1::GetTensorRequest* request) {
  return new GetTensorReactor(this, context, request);
}

grpc::ServerUnaryReactor* TensorOpsService::DeleteTensor(
    grpc::CallbackServerContext* context,
    const v1::DeleteTensorRequest* request,
    v1::DeleteTensorResponse* response) {
  return Answer(context, [&]() -> grpc::Status {
    Call call(metrics_, Rpc::kDeleteTensor, *context);
    const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
    if (!caller.ok()) return call.Finish(caller.status(), *request, *response);
    if (request->handles().empty()) {
      absl::StatusOr<int64_t> freed =
          tensors_->Delete(caller->identity, request->handle());
      if (freed.ok()) response->set_freed_bytes(*freed);
      return call.Finish(InField(freed.status(), "handle"), *request,
                         *response);
    }
    absl::StatusOr<int64_t> freed = DeleteTensors(caller->identity, *request);
    if (freed.ok()) response->set_freed_bytes(*freed);
    return call.Finish(freed.status(), *request, *response);
  }());
}

absl::StatusOr<int64_t> TensorOpsService::DeleteTensors(
    const std::string& owner, const v1::DeleteTensorRequest& request) {
  // Checked before anything is copied: the count, then repeats.
  const int count = request.handles_size() + (request.handle().empty() ? 0 : 1);
  if (count > kMaxDeleteHandles) {
    return absl::InvalidArgumentError(absl::StrCat(
        "handles: ", count, " tensors in one DeleteTensor, at most ",
        kMaxDeleteHandles));
  }
  std::vector<std::string> handles;
  handles.reserve(count);
  if (!request.handle().empty()) handles.push_back(request.handle());
  handles.insert(handles.end(), request.handles().begin(),
                 request.handles().end());
  // The request field of handles[i], for an error.
  const size_t first = request.handle().empty() ? 0 : 1;
  const auto field = [first](size_t i) {
    return i < first ? std::string("handle")
                     : absl::StrCat("handles[", i - first, "]");
  };
  absl::flat_hash_map<absl::string_view, size_t> seen;
  for (size_t i = 0; i < handles.size(); ++i) {
    auto [it, inserted] = seen.emplace(handles[i], i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(field(i), ": ", Quoted(handles[i]), " repeats ",
                       field(it->second), "; nothing was deleted"));
    }
  }
  size_t absent = 0;
  absl::StatusOr<int64_t> freed = tensors_->DeleteAll(owner, handles, &absent);
  if (!freed.ok()) {
    return absl::Status(
        freed.status().code(),
        absl::StrCat(field(absent), ": ", freed.status().message(),
                     "; nothing was deleted"));
  }
  return freed;
}

grpc::ServerUnaryReactor* TensorOpsService::ListTensors(
    grpc::CallbackServerContext* context, const v1::ListTensorsRequest* request,
    v1::ListTensorsResponse* response) {
  return Answer(context, [&]() -> grpc::Status {
    Call call(metrics_, Rpc::kListTensors, *context);
    const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
    if (!caller.ok()) return call.Finish(caller.status(), *request, *response);
    const std::string& client = caller->identity;
    for (const TensorListing& t : tensors_->List(client)) {
      FillTensorInfo(*backend_, t, response->add_tensors());
    }
    response->set_used_bytes(tensors_->used_bytes(client));
    response->set_quota_bytes(tensors_->options().quota_bytes);
    response->set_total_used_bytes(tensors_->total_used_bytes());
    response->set_cap_bytes(tensors_->options().cap_bytes);
    return call.Finish(absl::OkStatus(), *request, *response);
  }());
}

grpc::ServerUnaryReactor* TensorOpsService::RegisterSharedMemory(
    grpc::CallbackServerContext* context,
    const v1::RegisterSharedMemoryRequest* request,
    v1::RegisterSharedMemoryResponse* response) {
  return Answer(context, [&]() -> grpc::Status {
    Call call(metrics_, Rpc::kRegisterSharedMemory, *context);
    const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
    if (!caller.ok()) return call.Finish(caller.status(), *request, *response);
    return call.Finish(
        shared_memory_->Register(caller->identity, request->name(),
                                 request->key(), request->offset(),
                                 request->byte_size(), caller->uid),
        *request, *response);
  }());
}

grpc::ServerUnaryReactor* TensorOpsService::UnregisterSharedMemory(
    grpc::CallbackServerContext* context,
    const v1::UnregisterSharedMemoryRequest* request,
    v1::UnregisterSharedMemoryResponse* response) {
  return Answer(context, [&]() -> grpc::Status {
    Call call(metrics_, Rpc::kUnregisterSharedMemory, *context);
    const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
    if (!caller.ok()) return call.Finish(caller.status(), *request, *response);
    return call.Finish(
        shared_memory_->Unregister(caller->identity, request->name()), *request,
        *response);
  }());
}

grpc::ServerUnaryReactor* TensorOpsService::ListSharedMemory(
    grpc::CallbackServerContext* context,
    const v1::ListSharedMemoryRequest* request,
    v1::ListSharedMemoryResponse* response) {
  return Answer(context, [&]() -> grpc::Status {
    Call call(metrics_, Rpc::kListSharedMemory, *context);
    const absl::StatusOr<Caller> caller = auth_->Authenticate(*context);
    if (!caller.ok()) return call.Finish(caller.status(), *request, *response);
    for (const SharedMemoryListing& r :
         shared_memory_->List(caller->identity)) {
      // CUDA regions (registered through the KServe API) serve requests
      // here by name too, but are listed and unregistered there.
      if (r.on_device) continue;
      v1::SharedMemoryRegion* out = response->add_regions();
      out->set_name(r.name);
      out->set_key(r.key);
      out->set_offset(r.offset);
      out->set_byte_size(r.byte_size);
    }
    return call.Finish(absl::OkStatus(), *request, *response);
  }());
}

}  // namespace coalesce
