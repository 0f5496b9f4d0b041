// `coalesce put`, `get`, `rm` and `ls`: tensors kept on the server, uploaded
// from and downloaded to .npy files. Reads process-wide flags: call from the
// CLI's one thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/cli_common.h"

namespace coalesce::cli {

// Runs `command` (put, get, rm or ls) with its positional `args`; returns
// the exit status.
absl::StatusOr<int> RunTensorStoreCommand(absl::string_view command,
                                          const std::vector<std::string>& args,
                                          Connector connect);

}  // namespace coalesce::cli
