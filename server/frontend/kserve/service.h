// The KServe v2 / Open Inference Protocol service
// (inference.GRPCInferenceService), served beside coalesce.v1 on the same
// port. Five models, all version "1":
//   identity         OUTPUT0 = INPUT0, any datatype and shape (the
//                    protocol's floor: what a request costs without a
//                    kernel);
//   transpose        INPUT0 [M,N] or [B,M,N] -> OUTPUT0 with its last two
//                    dimensions swapped;
//   convert_layout   INPUT0 -> OUTPUT0; parameters layout_from and
//                    layout_to ("NCHW", "NHWC"), or permutation ("0,2,3,1"),
//                    or aos_soa ("aos_to_soa", "soa_to_aos") with fields;
//   gelu_layer_norm  x and optional bias, residual, gamma, beta -> y (and h
//                    with parameter return_pre_norm, or when outputs asks
//                    for it); parameters epsilon and approximation ("none",
//                    "tanh");
//   gemm             a, b and optional c -> d; parameters alpha, beta,
//                    trans_a, trans_b, allow_tf32.
// Outputs come back as the request's outputs asks (all when it is empty).
// ModelStreamInfer answers each request of a stream in turn, with the same
// path as ModelInfer. ModelConfig describes each model in Triton's terms,
// RepositoryIndex lists them, and ModelStatistics reports what each
// model's inferences (unary and streamed) counted and took, measured on
// the request path. SystemSharedMemory{Register,Status,Unregister} manage
// the caller's regions in the server's shared-memory registry (the native
// RegisterSharedMemory's: off unless --allow_client_shm, one client's
// regions invisible to another), and ModelInfer's inputs and outputs name
// them with the parameters shared_memory_region, shared_memory_byte_size
// and shared_memory_offset, as Triton's clients send them; every use is
// checked against the region's bounds. CUDA shared memory is not served
// (UNIMPLEMENTED).
// The native models take FP32, FP16 or BF16 (one for all of a request's
// tensors) and the request parameters "variant" (string: force a kernel
// variant) and "report" (bool: the KernelReport's figures as response
// parameters "report.*").
// Each native model is its native request run through TensorOpsService's
// op path (decode, queue, selection, backend), so both protocols share every
// check and kernel; the inputs' raw bytes are moved into it and the
// outputs' moved back out, never copied. Every RPC is authenticated like a
// native one and reported to the metrics; errors are absl::Status naming the
// protocol's field
// ("inputs[0].shape[1]: ...", "model_name: ...") and become grpc::Status at
// the edge (status.h). Thread-safe, like the native service.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "inference/grpc_service.grpc.pb.h"
#include "kernels/core/backend.h"
#include "server/auth/authenticator.h"
#include "server/frontend/native/service.h"
#include "server/metrics/service_metrics.h"
#include "server/store/shared_memory.h"

namespace coalesce {

class InferenceService final
    : public inference::GRPCInferenceService::CallbackService {
 public:
  // The model names served, in ModelMetadata's order.
  static constexpr const char* kIdentity = "identity";
  static constexpr const char* kTranspose = "transpose";
  static constexpr const char* kConvertLayout = "convert_layout";
  static constexpr const char* kGeluLayerNorm = "gelu_layer_norm";
  static constexpr const char* kGemm = "gemm";
  // The one version of each model.
  static constexpr const char* kVersion = "1";

  // backend, auth, metrics, ops and shared_memory are not owned and must
  // outlive the service; ops runs the native models, shared_memory is the
  // registry ops uses. version is ServerMetadata's. Every RPC is reported
  // to metrics (a native model's as ops reports it).
  InferenceService(const Backend* backend, const Authenticator* auth,
                   ServiceMetrics* metrics, TensorOpsService* ops,
                   SharedMemoryRegistry* shared_memory, std::string version);

  grpc::ServerUnaryReactor* ServerLive(
      grpc::CallbackServerContext* context,
      const inference::ServerLiveRequest* request,
      inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(
      grpc::CallbackServerContext* context,
      const inference::ServerReadyRequest* request,
      inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(
      grpc::CallbackServerContext* context,
      const inference::ModelReadyRequest* request,
      inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(
      grpc::CallbackServerContext* context,
      const inference::ServerMetadataRequest* request,
      inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(
      grpc::CallbackServerContext* context,
      const inference::ModelMetadataRequest* request,
      inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(
      grpc::CallbackServerContext* context,
      const inference::ModelInferRequest* request,
      inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest,
                          inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ModelConfig(
      grpc::CallbackServerContext* context,
      const inference::ModelConfigRequest* request,
      inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(
      grpc::CallbackServerContext* context,
      const inference::ModelStatisticsRequest* request,
      inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(
      grpc::CallbackServerContext* context,
      const inference::RepositoryIndexRequest* request,
      inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryStatusRequest* request,
      inference::CudaSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryRegisterRequest* request,
      inference::CudaSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryUnregisterRequest* request,
      inference::CudaSharedMemoryUnregisterResponse* response) override;

 private:
  // One stream of ModelStreamInfer (service.cc).
  class StreamReactor;
  // What one inference took, phase by phase (service.cc).
  struct Timing;

  // A count and the nanoseconds it took in all.
  struct Duration {
    uint64_t count = 0;
    uint64_t ns = 0;
    void Add(uint64_t n) {
      ++count;
      ns += n;
    }
  };
  // The requests served by launches of one batch size.
  struct BatchCounters {
    uint64_t requests = 0;
    Duration compute_input, compute_infer, compute_output;
  };
  // One model's statistics since the server started.
  struct ModelCounters {
    uint64_t last_inference_ms = 0;
    uint64_t inference_count = 0;
    Duration success, fail, queue, compute_input, compute_infer, compute_output;
    std::map<int64_t, BatchCounters> batches;  // by batch size
  };

  // One inference, for ModelInfer and each request of a stream: checks
  // request against its model and runs it, moving its inputs' bytes out
  // (into response or the native request); done gets the status once, on
  // this thread for an error found before the queue or an op run directly,
  // else on a scheduler thread. request and response must stay alive until
  // then. Counted in the metrics (as a native op, or kModelInfer) and in the
  // model's statistics.
  void Infer(grpc::CallbackServerContext* context,
             const absl::StatusOr<Caller>& caller,
             inference::ModelInferRequest& request,
             inference::ModelInferResponse* response,
             std::function<void(grpc::Status)> done);
  // Answers identity in response (the input moved or copied to the
  // output, either of them in one of caller's regions); timing gets its
  // phases.
  absl::Status Identity(const Caller& caller,
                        inference::ModelInferRequest& request,
                        inference::ModelInferResponse* response,
                        Timing& timing);
  // Adds one finished inference of model (kModels' index) to stats_.
  void Record(int model, bool ok, const Timing& timing);

  const Backend* const backend_;
  const Authenticator* const auth_;
  ServiceMetrics* const metrics_;
  TensorOpsService* const ops_;
  SharedMemoryRegistry* const shared_memory_;
  const std::string version_;
  absl::Mutex stats_mu_;
  // By model, in kModels' order.
  std::vector<ModelCounters> stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace coalesce
