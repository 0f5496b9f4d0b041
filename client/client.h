// A typed client for the coalesce.v1.TensorOps service and the standard
// grpc.health.v1 health check, returning absl::StatusOr instead of
// grpc::Status (codes are the same; the server's message is kept). Used by
// the CLI, the benchmarks and the end-to-end tests.
//
// Thread-safety: a Client may be shared by many threads; every call makes
// its own ClientContext on the one channel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coalesce/v1/tensor_ops.pb.h"

namespace coalesce {

struct ClientOptions {
  std::string server = "localhost:50051";
  // Raises gRPC's 4 MiB default on both directions: tensors travel inline.
  // 1 .. INT32_MAX (gRPC's channel argument is an int).
  int64_t max_message_bytes = 2147483647;
  // Deadline of each call; absl::InfiniteDuration() sets none.
  absl::Duration timeout = absl::Minutes(10);
};

class Client {
 public:
  // Creates the channel (insecure credentials). gRPC connects lazily: an
  // unreachable server shows up as UNAVAILABLE on the first call. Fails only
  // on invalid options (INVALID_ARGUMENT).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const ClientOptions& options);

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  absl::StatusOr<v1::TransposeResponse> Transpose(
      const v1::TransposeRequest& request);
  absl::StatusOr<v1::GemmResponse> Gemm(const v1::GemmRequest& request);
  absl::StatusOr<v1::ConvertLayoutResponse> ConvertLayout(
      const v1::ConvertLayoutRequest& request);
  absl::StatusOr<v1::GeluLayerNormResponse> GeluLayerNorm(
      const v1::GeluLayerNormRequest& request);
  absl::StatusOr<v1::GetServerInfoResponse> GetServerInfo();
  absl::StatusOr<v1::ExplainSelectionResponse> ExplainSelection(
      const v1::ExplainSelectionRequest& request);

  // grpc.health.v1.Health/Check for `service` ("" is the whole server).
  // Returns the serving status by name: "SERVING", "NOT_SERVING", ...
  absl::StatusOr<std::string> Health(const std::string& service = "");

 private:
  // Holds the stubs, so that the health stubs stay a private dependency.
  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace coalesce
