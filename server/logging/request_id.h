// The request id that names one request in every log line about it and in
// its access-log line, and that goes back to the client (x-request-id
// metadata on gRPC, the X-Request-Id header on REST) so that a client's
// report can be matched to the server's logs.
//
// Where it comes from, first that applies: the client's x-request-id (1 to
// kMaxRequestIdLength visible ASCII characters; anything else is ignored,
// so a client cannot put control characters or unbounded text into the
// logs); the trace-id of a W3C traceparent
// (https://www.w3.org/TR/trace-context/#traceparent-header), so that the
// logs join the caller's trace; else 128 random bits, as 32 hex digits.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace coalesce {

inline constexpr size_t kMaxRequestIdLength = 128;
// The metadata key (gRPC) and, case aside, the header (HTTP).
inline constexpr char kRequestIdKey[] = "x-request-id";
inline constexpr char kTraceparentKey[] = "traceparent";

// Whether value is acceptable as a client's x-request-id.
bool ValidRequestId(absl::string_view value);

// The trace-id of a traceparent value (32 lowercase hex digits, not all
// zero); nullopt when value is not a valid traceparent: version 2 hex
// digits other than ff, trace-id, parent-id (16 hex digits, not all zero)
// and flags (2 hex digits), separated by '-'. Version 00 has exactly these
// fields; a later version may add fields after another '-'.
std::optional<std::string> TraceIdOf(absl::string_view traceparent);

// 128 random bits as 32 lowercase hex digits.
std::string NewRequestId();

// The request's id from its x-request-id and traceparent values (empty:
// absent), as the header comment says.
std::string ResolveRequestId(absl::string_view x_request_id,
                             absl::string_view traceparent);

}  // namespace coalesce
