// How an error message quotes a string that came from a client (a variant
// name, a tensor handle, a region name or key): in single quotes, at most
// kMaxQuotedBytes of it, non-printable bytes escaped, and the full length
// named when it was cut. An error must never echo an unbounded input: a
// 64 KiB name would come back as a 64 KiB status message, past what gRPC
// carries in its trailers. Pure function; thread-safe.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace coalesce {

inline constexpr size_t kMaxQuotedBytes = 64;

// 'abc'; 'first 64 bytes...' (65536 bytes) when longer.
std::string Quoted(absl::string_view s);

}  // namespace coalesce
