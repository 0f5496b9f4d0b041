// `coalesce info` and `coalesce health`: what the server runs on and offers,
// and whether it serves. Reads process-wide flags: call from the CLI's one
// thread.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"

namespace coalesce::cli {

// Prints the backend, devices, build, limits and kernel variants by op.
absl::Status RunInfo(Client& client);

// Prints the grpc.health.v1 status of --service; true only for SERVING.
absl::StatusOr<bool> RunHealth(Client& client);

}  // namespace coalesce::cli
