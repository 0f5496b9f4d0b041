// The one place where absl::Status becomes grpc::Status, at the edge of the
// service. Abseil's codes are gRPC's codes, so the mapping is 1:1 and the
// message passes through. Pure function; thread-safe.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace coalesce {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace coalesce
