// The coalesce.v1.TensorOps service: decodes a request (codec.h), selects a
// kernel variant, runs it on the backend with the outputs written straight
// where they go (the response's bytes, a new stored tensor or a registered
// shared-memory region), and fills the KernelReport when asked. It also
// serves Echo (the benchmark's floor), the tensor store's RPCs (PutTensor,
// GetTensor, DeleteTensor, ListTensors) and the shared-memory registry's.
// Every RPC, failed ones included, is reported to the injected
// ServiceMetrics.
// Errors are absl::Status inside and become grpc::Status only at the RPC
// edge (status.h). Thread-safe: gRPC calls it from many threads at once; the
// backend and the metrics are themselves thread-safe.
#pragma once

#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "kernels/core/backend.h"
#include "kernels/selection/selector.h"
#include "server/auth/authenticator.h"
#include "server/config.h"
#include "server/frontend/native/codec.h"
#include "server/frontend/rpc_call.h"
#include "server/metrics/service_metrics.h"
#include "server/scheduler/scheduler.h"
#include "server/store/shared_memory.h"
#include "server/store/tensor_store.h"

namespace coalesce {

// Every RPC uses gRPC's callback API, so that no thread waits for a
// request: an op is authenticated and decoded on gRPC's thread, then waits
// its turn in the device's Scheduler and runs on one of its threads, which
// finishes the call (gRPC's thread returns at once: held for the op, it
// delays gRPC's own work). A short op on an idle device
// (ServerConfig::direct_run_max_bytes) runs on gRPC's thread instead.
// PutTensor and GetTensor are reactors that copy one chunk per message; the
// other RPCs answer at once.
class TensorOpsService final : public v1::TensorOps::CallbackService {
 public:
  // backend, metrics, selector, tensors, shared_memory, auth and scheduler
  // are not owned and must outlive the service. auth decides who each call
  // is: every RPC is authenticated first, and reaches only its caller's
  // tensors and regions. backend_reason says why this backend serves
  // (reported by GetServerInfo). selector chooses the variant of every
  // request without a forced one. tensors must keep its bytes in backend's
  // resident memory (BackendTensorMemory): ops hand stored tensors to
  // backend->Execute as resident operands. schedulers (one per device of
  // backend, in device index order) admit and order the work that runs on
  // each device (ops, ExplainSelection's measure): a request goes to the
  // device holding most of its resident operands' bytes, else to the
  // healthy one with the least outstanding work.
  TensorOpsService(Backend* backend, ServerConfig config,
                   std::string backend_reason, ServiceMetrics* metrics,
                   Selector* selector, TensorStore* tensors,
                   SharedMemoryRegistry* shared_memory,
                   const Authenticator* auth,
                   std::vector<Scheduler*> schedulers);

  // Publishes the backend's health as the serving status of "", of
  // coalesce.v1.TensorOps and of the services in `also` (other front ends
  // of the same ops), now and after every failed execution, so that a
  // sticky device fault turns the server NOT_SERVING instead of it silently
  // failing every request. health is not owned; it outlives the service's
  // RPCs (both belong to one grpc::Server).
  void AttachHealth(grpc::HealthCheckServiceInterface* health,
                    std::vector<std::string> also = {});

  grpc::ServerUnaryReactor* Transpose(grpc::CallbackServerContext* context,
                                      const v1::TransposeRequest* request,
                                      v1::TransposeResponse* response) override;
  grpc::ServerUnaryReactor* Gemm(grpc::CallbackServerContext* context,
                                 const v1::GemmRequest* request,
                                 v1::GemmResponse* response) override;
  grpc::ServerUnaryReactor* ConvertLayout(
      grpc::CallbackServerContext* context,
      const v1::ConvertLayoutRequest* request,
      v1::ConvertLayoutResponse* response) override;
  grpc::ServerUnaryReactor* GeluLayerNorm(
      grpc::CallbackServerContext* context,
      const v1::GeluLayerNormRequest* request,
      v1::GeluLayerNormResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(
      grpc::CallbackServerContext* context,
      const v1::GetServerInfoRequest* request,
      v1::GetServerInfoResponse* response) override;
  grpc::ServerUnaryReactor* ExplainSelection(
      grpc::CallbackServerContext* context,
      const v1::ExplainSelectionRequest* request,
      v1::ExplainSelectionResponse* response) override;
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context,
                                 const v1::EchoRequest* request,
                                 v1::EchoResponse* response) override;
  grpc::ServerReadReactor<v1::PutTensorRequest>* PutTensor(
      grpc::CallbackServerContext* context,
      v1::PutTensorResponse* response) override;
  grpc::ServerWriteReactor<v1::GetTensorResponse>* GetTensor(
      grpc::CallbackServerContext* context,
      const v1::GetTensorRequest* request) override;
  grpc::ServerUnaryReactor* DeleteTensor(
      grpc::CallbackServerContext* context,
      const v1::DeleteTensorRequest* request,
      v1::DeleteTensorResponse* response) override;
  grpc::ServerUnaryReactor* ListTensors(
      grpc::CallbackServerContext* context,
      const v1::ListTensorsRequest* request,
      v1::ListTensorsResponse* response) override;
  grpc::ServerUnaryReactor* RegisterSharedMemory(
      grpc::CallbackServerContext* context,
      const v1::RegisterSharedMemoryRequest* request,
      v1::RegisterSharedMemoryResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterSharedMemory(
      grpc::CallbackServerContext* context,
      const v1::UnregisterSharedMemoryRequest* request,
      v1::UnregisterSharedMemoryResponse* response) override;
  grpc::ServerUnaryReactor* ListSharedMemory(
      grpc::CallbackServerContext* context,
      const v1::ListSharedMemoryRequest* request,
      v1::ListSharedMemoryResponse* response) override;

  // The Transpose RPC's path for another protocol's front end (kserve/):
  // caller is the result of authenticating context (an error is answered as
  // the RPC would); request is decoded, queued, selected for and run exactly
  // as a Transpose RPC's, its output and report written into response. done
  // gets the call's status once, when it is over: on the calling thread for
  // an error found before the queue or an op run directly, else on a
  // scheduler thread. context,
  // request and response must stay alive until done has run. The call
  // counts as a Transpose in the metrics.
  void RunTranspose(grpc::CallbackServerContext* context,
                    absl::StatusOr<Caller> caller,
                    const v1::TransposeRequest* request,
                    v1::TransposeResponse* response,
                    std::function<void(grpc::Status)> done);
  // The other ops' paths, as RunTranspose's (each counts as its RPC).
  void RunGemm(grpc::CallbackServerContext* context,
               absl::StatusOr<Caller> caller, const v1::GemmRequest* request,
               v1::GemmResponse* response,
               std::function<void(grpc::Status)> done);
  void RunConvertLayout(grpc::CallbackServerContext* context,
                        absl::StatusOr<Caller> caller,
                        const v1::ConvertLayoutRequest* request,
                        v1::ConvertLayoutResponse* response,
                        std::function<void(grpc::Status)> done);
  void RunGeluLayerNorm(grpc::CallbackServerContext* context,
                        absl::StatusOr<Caller> caller,
                        const v1::GeluLayerNormRequest* request,
                        v1::GeluLayerNormResponse* response,
                        std::function<void(grpc::Status)> done);

  // GetTensor's chunk size when the request names none.
  static constexpr int64_t kDefaultChunkBytes = int64_t{4} << 20;

 private:
  // One RPC as the metrics see it.
  using Call = RpcCall;
  // An op call between its handler and its Finish (service.cc).
  struct OpState;
  // The streams, one object per call (service.cc).
  class PutTensorReactor;
  class GetTensorReactor;
  // Where an op writes: its response's output tensors (null for one not
  // asked for) and report (null unless asked for).
  struct OpSlots {
    absl::InlinedVector<v1::Tensor*, 2> outputs;
    v1::KernelReport* report = nullptr;
  };

  // The default reactor, finished with status.
  static grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                          grpc::Status status);
  // An op's path (the Run* wrappers): SubmitOp with the op's RPC, decoder
  // and response outputs (OpTraits, service.cc).
  template <typename Request, typename Response>
  void RunOp(grpc::CallbackServerContext* context,
             absl::StatusOr<Caller> caller, const Request* request,
             Response* response, std::function<void(grpc::Status)> done);
  // An op's handler: authenticates, then RunOp, its reactor finished with
  // the call's status.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* StartOp(grpc::CallbackServerContext* context,
                                    const Request* request, Response* response);
  // The op path without a reactor, shared by the native RPCs and other
  // front ends: with caller authenticated, decodes and queues the run on the
  // scheduler; done gets the call's status once (at once for an error).
  void SubmitOp(
      grpc::CallbackServerContext* context, Rpc rpc,
      absl::StatusOr<Caller> caller, const google::protobuf::Message* request,
      google::protobuf::Message* response,
      absl::FunctionRef<absl::StatusOr<DecodedRequest>(const DataPlane&)>
          decode,
      absl::FunctionRef<OpSlots(const DecodedRequest&)> slots,
      std::function<void(grpc::Status)> done);

  // Selects a variant for d, places each requested output where
  // d.output_targets says (inline: the matching response tensor's bytes;
  // a handle: a new stored tensor owned by the caller; shared memory:
  // already resolved), runs it and fills report when d.report.
  absl::Status Run(Call& call, grpc::ServerContextBase& context,
                   const Caller& caller, const DecodedRequest& d, int device,
                   absl::Span<v1::Tensor* const> outputs,
                   v1::KernelReport* report);
  // DeleteTensor of several tensors (handle and handles): all of owner's
  // or none, each error naming its field.
  static constexpr int kMaxDeleteHandles = 4096;
  absl::StatusOr<int64_t> DeleteTensors(const std::string& owner,
                                        const v1::DeleteTensorRequest& request);
  // The device (index) whose scheduler takes a request: the one holding
  // most of its resident operands' bytes, else the healthy one with the
  // least outstanding work (Scheduler::Stats::outstanding_seconds).
  int PickDevice(const DecodedRequest* d) const;
  // Where d's outputs go (d.output_targets): each requested output's
  // response tensor is filled in and operands.outputs points at its memory
  // (inline: the response's bytes; a handle: a new stored tensor of the
  // caller's, its handle added to created, or an existing one; shared
  // memory: already resolved). On error the created tensors are deleted.
  absl::Status PlaceOutputs(const Caller& caller, const DecodedRequest& d,
                            int device, absl::Span<v1::Tensor* const> outputs,
                            Operands& operands,
                            absl::InlinedVector<std::string, 2>& created);
  // After a successful launch that served `requests` requests: its figures,
  // reported once to the metrics (through call) for the kernel report(s).
  KernelObservation LaunchDone(Call& call, const Problem& p,
                               const KernelVariant& variant,
                               const RunResult& run, int requests);
  // Deletes the tensors PlaceOutputs created (the kernel failed).
  void Abandon(const Caller& caller, absl::Span<const std::string> created);
  // After a successful kernel: checks d's regions survived it and commits
  // the created tensors (abandons them on error).
  absl::Status Settle(const Caller& caller, const DecodedRequest& d,
                      absl::Span<const std::string> created);
  // The scheduler batch key of d ("" when it runs alone): the stacking key
  // of its problem, its forced variant and its shared inputs; only for
  // config_.batch_ops.
  std::string BatchKey(const DecodedRequest& d) const;
  // A scheduler batch (Job::run_batch): the requests whose shared inputs
  // equal the first one's run as one stacked launch; the others, and all of
  // them when the stacked problem cannot run, run alone. Ends every call.
  void RunBatch(std::vector<Job> jobs);
  // Runs batch (two or more requests, shared inputs equal) as one launch
  // and finishes every call; false, leaving in batch those not yet
  // finished, when no variant implements the stacked problem.
  bool RunStacked(std::vector<std::shared_ptr<OpState>>& batch);
  DataPlane plane(const Caller& caller) const {
    return DataPlane{tensors_, shared_memory_, caller.identity};
  }
  void PublishHealth();

  Backend* const backend_;
  const ServerConfig config_;
  const std::string backend_reason_;
  ServiceMetrics* const metrics_;
  Selector* const selector_;
  TensorStore* const tensors_;
  SharedMemoryRegistry* const shared_memory_;
  const Authenticator* const auth_;
  const std::vector<Scheduler*> schedulers_;  // by device index
  std::atomic<grpc::HealthCheckServiceInterface*> health_{nullptr};
  // Set once by AttachHealth, before health_.
  std::vector<std::string> health_services_;
};

}  // namespace coalesce
