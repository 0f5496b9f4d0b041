// The coalesce.v1.TensorOps service: decodes a request (codec.h), selects a
// kernel variant, runs it on the backend with the outputs written straight
// into the response's bytes, and fills the KernelReport when asked. Every
// RPC, failed ones included, is reported to the injected ServiceMetrics.
// Errors are absl::Status inside and become grpc::Status only at the RPC
// edge (status.h). Thread-safe: gRPC calls it from many threads at once; the
// backend and the metrics are themselves thread-safe.
#pragma once

#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "kernels/core/backend.h"
#include "kernels/core/selector.h"
#include "server/codec.h"
#include "server/config.h"
#include "server/service_metrics.h"

namespace coalesce {

class TensorOpsService final : public v1::TensorOps::Service {
 public:
  // backend and metrics are not owned and must outlive the service.
  // backend_reason says why this backend serves (reported by GetServerInfo).
  // selector chooses the variant of every request without a forced one.
  TensorOpsService(Backend* backend, ServerConfig config,
                   std::string backend_reason, ServiceMetrics* metrics,
                   Selector* selector);

  // Publishes the backend's health as the serving status of "" and of
  // coalesce.v1.TensorOps, now and after every failed execution, so that a
  // sticky device fault turns the server NOT_SERVING instead of it silently
  // failing every request. health is not owned; it outlives the service's
  // RPCs (both belong to one grpc::Server).
  void AttachHealth(grpc::HealthCheckServiceInterface* health);

  grpc::Status Transpose(grpc::ServerContext* context,
                         const v1::TransposeRequest* request,
                         v1::TransposeResponse* response) override;
  grpc::Status Gemm(grpc::ServerContext* context,
                    const v1::GemmRequest* request,
                    v1::GemmResponse* response) override;
  grpc::Status ConvertLayout(grpc::ServerContext* context,
                             const v1::ConvertLayoutRequest* request,
                             v1::ConvertLayoutResponse* response) override;
  grpc::Status GeluLayerNorm(grpc::ServerContext* context,
                             const v1::GeluLayerNormRequest* request,
                             v1::GeluLayerNormResponse* response) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context,
                             const v1::GetServerInfoRequest* request,
                             v1::GetServerInfoResponse* response) override;
  grpc::Status ExplainSelection(
      grpc::ServerContext* context, const v1::ExplainSelectionRequest* request,
      v1::ExplainSelectionResponse* response) override;

 private:
  // One RPC as the metrics see it (service.cc).
  class Call;

  // Selects a variant for d, allocates each requested output in the matching
  // response tensor (same order as d.output_shapes), runs it and fills
  // report when d.report.
  absl::Status Run(Call& call, const DecodedRequest& d,
                   absl::Span<v1::Tensor* const> outputs,
                   v1::KernelReport* report);
  void PublishHealth();

  Backend* const backend_;
  const ServerConfig config_;
  const std::string backend_reason_;
  ServiceMetrics* const metrics_;
  Selector* const selector_;
  std::atomic<grpc::HealthCheckServiceInterface*> health_{nullptr};
};

}  // namespace coalesce
