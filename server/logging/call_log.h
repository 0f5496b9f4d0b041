// Request ids and the access log for every gRPC call the server serves,
// whatever its service (coalesce.v1, KServe v2, health, reflection), set up
// once on the ServerBuilder:
//   - a server interceptor resolves each call's request id from its
//     metadata (request_id.h), sends it back as x-request-id in the initial
//     and the trailing metadata, logs the call's outcome (at error level for
//     INTERNAL, UNKNOWN and DATA_LOSS, else at debug) and writes its
//     access-log line;
//   - a context allocator gives the callback API's calls a context that
//     leads to the call's CallRecord, where the handlers note what only they
//     know (who called, the sizes, the queue and kernel times) through
//     CallRecordOf: the Authenticator and RpcCall do.
#pragma once

#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>

#include <cstdint>
#include <string>

#include "server/logging/access_log.h"

namespace coalesce {

// What the handlers of one call note for its access line. Written by the
// call's handler (one thread at a time) before it finishes the call, read
// after.
struct CallRecord {
  std::string request_id;
  std::string identity;
  int64_t request_bytes = -1;  // -1: not noted
  int64_t response_bytes = -1;
  bool ran_kernel = false;
  double queue_seconds = 0;   // summed over the call's kernel runs
  double kernel_seconds = 0;  // likewise
};

// The record of the call context serves; null for a context the server
// did not set up with InstallCallLogging (the sync API's, or tests').
CallRecord* CallRecordOf(const grpc::ServerContextBase& context);

// Sets up builder as the header comment says; access_log (not owned, may be
// null: request ids and outcomes only) must outlive the server.
void InstallCallLogging(grpc::ServerBuilder& builder, AccessLog* access_log);

}  // namespace coalesce
