// One RPC as the metrics see it, shared by the front ends: started on
// construction (or at a given earlier time), finished by Finish, which every
// return path of a handler goes through; Finish also maps the status to the
// grpc::Status the call answers (status.h). It notes the sizes and the queue
// and kernel times on the call's record for the access log (call_log.h).
// Not thread-safe: one call's handler, or the one thread that finishes it,
// uses it at a time.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/frontend/status.h"
#include "server/logging/call_log.h"
#include "server/metrics/service_metrics.h"

namespace coalesce {

class RpcCall {
 public:
  using Clock = std::chrono::steady_clock;

  // context: the gRPC call this serves (several RpcCalls may serve one, as
  // a stream's requests do).
  RpcCall(ServiceMetrics* metrics, Rpc rpc,
          const grpc::ServerContextBase& context, Clock::time_point start)
      : metrics_(metrics),
        rpc_(rpc),
        start_(start),
        record_(CallRecordOf(context)) {
    metrics_->RpcStarted(rpc_);
  }
  RpcCall(ServiceMetrics* metrics, Rpc rpc,
          const grpc::ServerContextBase& context)
      : RpcCall(metrics, rpc, context, Clock::now()) {}
  RpcCall(const RpcCall&) = delete;
  RpcCall& operator=(const RpcCall&) = delete;

  ServiceMetrics& metrics() { return *metrics_; }
  // The gRPC call's request id (request_id.h), for RequestLogScope; empty
  // for a call without a record.
  absl::string_view request_id() const {
    return record_ == nullptr ? absl::string_view() : record_->request_id;
  }

  // The request leaves the service for the backend.
  void BackendStarted() {
    reached_backend_ = true;
    backend_started_ = Seconds();
    metrics_->BackendStarted(rpc_);
  }
  // The backend returned run: the queue time ends where the launch began,
  // after the backend's own wait for a stream (RunResult::stream_wait_seconds).
  void Launched(const RunResult& run) {
    const double queue_seconds = backend_started_ + run.stream_wait_seconds;
    metrics_->Launched(rpc_, queue_seconds);
    if (record_ != nullptr) {
      record_->ran_kernel = true;
      record_->queue_seconds += queue_seconds;
      record_->kernel_seconds += run.kernel_seconds;
    }
  }

  grpc::Status Finish(const absl::Status& status,
                      const google::protobuf::Message& request,
                      const google::protobuf::Message& response) {
    // gRPC sends no message with an error status.
    return Finish(
        status, static_cast<int64_t>(request.ByteSizeLong()),
        status.ok() ? static_cast<int64_t>(response.ByteSizeLong()) : 0);
  }

  // For streams: the bytes of every message, as counted by the handler.
  grpc::Status Finish(const absl::Status& status, int64_t request_bytes,
                      int64_t response_bytes) {
    RpcOutcome outcome;
    outcome.rpc = rpc_;
    outcome.code = status.code();
    outcome.seconds = Seconds();
    outcome.request_bytes = request_bytes;
    outcome.response_bytes = response_bytes;
    outcome.reached_backend = reached_backend_;
    metrics_->RpcFinished(outcome);
    // The call's last RpcCall to finish (a stream's own) has the call's
    // totals.
    if (record_ != nullptr) {
      record_->request_bytes = request_bytes;
      record_->response_bytes = response_bytes;
    }
    return ToGrpcStatus(status);
  }

 private:
  double Seconds() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }

  ServiceMetrics* const metrics_;
  const Rpc rpc_;
  const Clock::time_point start_;
  CallRecord* const record_;  // null: none (call_log.h)
  bool reached_backend_ = false;
  double backend_started_ = 0;  // seconds after start_
};

}  // namespace coalesce
