// What every `coalesce` subcommand shares: usage errors (exit status 2
// rather than 1), flag value parsing, byte counts for people, and the
// connection callback through which a subcommand reaches the server once its
// own arguments are checked. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/client.h"

namespace coalesce::cli {

// An INVALID_ARGUMENT marked as a usage error: the CLI exits 2 and points at
// --help.
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

// "--flag=1,2,3" as integers; a usage error naming the flag otherwise.
absl::StatusOr<std::vector<int64_t>> ParseInts(absl::string_view flag,
                                               absl::string_view text);

// "512 B", "1.50 KiB", ... "2.00 TiB".
std::string FormatBytes(double bytes);

// Connects with the connection flags (--server, --max_message_bytes,
// --timeout_s); a bad flag is a usage error.
using Connector = absl::FunctionRef<absl::StatusOr<std::unique_ptr<Client>>()>;

}  // namespace coalesce::cli
