// `coalesce explain` and `coalesce tune`: what the server would pick for a
// request shape and why, and an offline sweep that times every eligible
// variant over a list of shapes and writes a table the server loads with
// --tuning_table. Both reuse the op subcommands' request building: the op
// builds the request, then hands it here instead of sending it.
// Reads and sets process-wide flags: call from the CLI's one thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/cli_common.h"

namespace coalesce::cli {

// Runs `command` (explain or tune) for `op` (transpose, gemm, layout or
// gelu-ln); `inputs` are the --input files in order. Returns the exit
// status: tune exits 1 when a shape failed, after writing the others.
absl::StatusOr<int> RunSelectionCommand(absl::string_view command,
                                        absl::string_view op,
                                        std::vector<std::string> inputs,
                                        Connector connect);

}  // namespace coalesce::cli
