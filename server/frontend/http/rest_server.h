// The KServe v2 / Open Inference Protocol over HTTP/REST (--http_listen),
// with Triton's binary tensor data extension. Each request becomes the
// matching inference.GRPCInferenceService call on the server's in-process
// channel, so REST and gRPC share one path for authentication (the
// Authorization: Bearer and x-coalesce-client headers travel as the same
// metadata), validation, the device queue, selection, kernels, metrics and
// statistics; only the JSON and binary framing is done here. Served:
//   GET  /v2, /v2/health/live, /v2/health/ready,
//        /v2/models/M[/versions/V], /v2/models/M[/versions/V]/ready,
//        /v2/models/M[/versions/V]/config, /v2/models[/M[/versions/V]]/stats,
//        /v2/{system,cuda}sharedmemory[/region/R]/status
//   POST /v2/models/M[/versions/V]/infer, /v2/repository/index,
//        /v2/{system,cuda}sharedmemory/region/R/register,
//        /v2/{system,cuda}sharedmemory[/region/R]/unregister
// Config and statistics are the gRPC messages in Triton's JSON (proto field
// names, 64-bit counts as numbers).
// JSON "data" carries BOOL, the integer types, FP32 and FP64; FP16, BF16
// and BYTES travel only as binary data (binary_data_size), and FP16 and
// BF16 outputs always come back as binary data. Errors are
// {"error": "..."} with the HTTP status of the call's grpc::StatusCode.
// A body above max_body_bytes is refused (413) before it is read.
// Built on civetweb, IPv4 only, like the metrics endpoint.
//
// Thread-safety: Start and the destructor from one thread; requests are
// answered on civetweb's threads. The channel's server must outlive this.
#pragma once

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/logging/access_log.h"

struct mg_context;
struct mg_connection;

namespace coalesce {

class RestServer {
 public:
  // Listens on address ("HOST:PORT"; port 0 picks a free port, see port()).
  // UNAVAILABLE when the address cannot be bound. Each request gets a
  // request id (request_id.h, from its X-Request-Id or traceparent header),
  // which it answers in X-Request-Id and passes on to the gRPC calls it
  // makes; access_log (not owned, may be null) gets a line per request.
  static absl::StatusOr<std::unique_ptr<RestServer>> Start(
      absl::string_view address, std::shared_ptr<grpc::Channel> channel,
      int64_t max_body_bytes, AccessLog* access_log);

  RestServer(const RestServer&) = delete;
  RestServer& operator=(const RestServer&) = delete;
  // Stops listening and waits for requests being answered.
  ~RestServer();

  // The TCP port actually bound.
  int port() const { return port_; }

 private:
  RestServer(std::shared_ptr<grpc::Channel> channel, int64_t max_body_bytes,
             AccessLog* access_log);
  static int Handle(mg_connection* conn, void* self);

  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  const int64_t max_body_bytes_;
  AccessLog* const access_log_;
  mg_context* context_ = nullptr;
  int port_ = 0;
};

}  // namespace coalesce
