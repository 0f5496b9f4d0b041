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
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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
  // Sent as x-coalesce-client metadata: the identity server-side tensors
  // belong to on a server without authentication. Empty: the server uses
  // the caller's uid (local socket) or address. A server with
  // authentication ignores it.
  std::string client_id;
  // Sent as `authorization: Bearer TOKEN` with every call (a server started
  // with --auth_tokens). Over plaintext beyond loopback anyone on the path
  // can read it: use TLS.
  std::string token;
  // TLS: a PEM file of the CA certificates the server's certificate must
  // chain to; empty: plaintext. server may also be unix:PATH (plaintext).
  std::string tls_ca_path;
  // mTLS: the client's PEM certificate chain and private key.
  std::string tls_cert_path;
  std::string tls_key_path;
  // The name the server's certificate must carry, when it differs from the
  // host in server (e.g. connecting by IP address).
  std::string tls_server_name;
  // Bytes per PutTensor chunk (at most max_message_bytes - 1 KiB).
  int64_t chunk_bytes = int64_t{4} << 20;
  // How calls spread over the addresses server resolves to (several with
  // "ipv4:127.0.0.1:50051,127.0.0.1:50052" or a DNS name with
  // "dns:///NAME:PORT", e.g. a headless Service): "round_robin" sends each
  // call to the next ready address; "pick_first" (also "", gRPC's default)
  // sends all to one. Set as the channel's gRPC service config.
  std::string load_balancing;
  // Open a connection of this client's own instead of sharing one with
  // other clients of the same options (gRPC's global subchannel pool).
  bool own_connection = false;
};

// A downloaded server-side tensor.
struct FetchedTensor {
  v1::TensorInfo info;
  std::string bytes;
};

class Client {
 public:
  // Creates the channel (TLS when tls_ca_path is set, else plaintext). gRPC
  // connects lazily: an unreachable server shows up as UNAVAILABLE on the
  // first call. Fails only on invalid options (INVALID_ARGUMENT) or an
  // unreadable PEM file (NOT_FOUND).
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

  absl::StatusOr<v1::EchoResponse> Echo(const v1::EchoRequest& request);

  // Uploads bytes (product(shape) * sizeof(dtype) of them) in chunks of
  // options.chunk_bytes; name empty lets the server pick the handle, and no
  // device_ordinal the device it lives on.
  absl::StatusOr<v1::TensorInfo> PutTensor(
      v1::DataType dtype, const std::vector<int64_t>& shape,
      absl::string_view bytes, const std::string& name = "",
      std::optional<int> device_ordinal = std::nullopt);
  absl::StatusOr<FetchedTensor> GetTensor(const std::string& handle);
  // The bytes freed.
  absl::StatusOr<int64_t> DeleteTensor(const std::string& handle);
  // All of handles in one call, or none (the error names the handle): the
  // bytes freed. At most 4096.
  absl::StatusOr<int64_t> DeleteTensors(
      const std::vector<std::string>& handles);
  absl::StatusOr<v1::ListTensorsResponse> ListTensors();
  absl::Status RegisterSharedMemory(const std::string& name,
                                    const std::string& key, uint64_t offset,
                                    uint64_t byte_size);
  absl::Status UnregisterSharedMemory(const std::string& name);
  absl::StatusOr<v1::ListSharedMemoryResponse> ListSharedMemory();

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
