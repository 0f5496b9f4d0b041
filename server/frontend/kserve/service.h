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

#include <string>

#include "absl/status/status.h"
#include "inference/grpc_service.grpc.pb.h"
#include "kernels/core/backend.h"
#include "server/auth/authenticator.h"
#include "server/frontend/native/service.h"
#include "server/metrics/service_metrics.h"

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

  // backend, auth, metrics and ops are not owned and must outlive the
  // service; ops runs the native models. version is ServerMetadata's. Every
  // RPC is reported to metrics (a native model's as ops reports it).
  InferenceService(const Backend* backend, const Authenticator* auth,
                   ServiceMetrics* metrics, TensorOpsService* ops,
                   std::string version);

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

 private:
  // Answers identity in response (the input moved to the output).
  absl::Status Identity(inference::ModelInferRequest& request,
                        inference::ModelInferResponse* response);

  const Backend* const backend_;
  const Authenticator* const auth_;
  ServiceMetrics* const metrics_;
  TensorOpsService* const ops_;
  const std::string version_;
};

}  // namespace coalesce
