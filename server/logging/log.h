// The server's log: its level and format (--log_level, --log_format), and
// the request id that marks each line about a request.
//
// Text lines keep spdlog's layout, with the request id in brackets before
// the message:
//   [2025-01-02 03:04:05.678] [coalesce] [error] [ID] message
// JSON lines are one object each, with ts (RFC 3339, UTC, microseconds),
// level (spdlog's names: trace, debug, info, warning, error, critical),
// logger, msg and, on a line about a request, request_id.
//
// Thread-safety: ConfigureLogging once at start-up, before other threads
// log; the rest is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "spdlog/common.h"
#include "spdlog/formatter.h"

namespace coalesce {

enum class LogFormat { kText, kJson };

// "text" or "json"; false for anything else.
bool ParseLogFormat(absl::string_view text, LogFormat* format);
// trace, debug, info, warn, error, critical or off; false for anything
// else.
bool ParseLogLevel(absl::string_view text, spdlog::level::level_enum* level);

// What a logger's message is to its formatter.
enum class LogPayload {
  // Free text: escaped into msg (JSON).
  kMessage,
  // Already the line's fields: key=value pairs (text) or members of the
  // JSON object, starting with "msg" (json); written as they are. The access
  // log's lines (access_log.h).
  kFields,
};

// The formatter of format for a logger whose messages are payload.
std::unique_ptr<spdlog::formatter> NewLogFormatter(LogFormat format,
                                                   LogPayload payload);

// Makes the default logger ("coalesce", on stderr: stdout carries only the
// start-up lines that scripts parse) log at level in format, and sends
// gRPC's own log lines through it, so that they are in the same format.
void ConfigureLogging(spdlog::level::level_enum level, LogFormat format);

// While one lives, lines logged on its thread are about the request of this
// id (ids are ValidRequestId or hex: nothing to escape in text). Scopes
// nest; an empty id marks no request.
class RequestLogScope {
 public:
  explicit RequestLogScope(absl::string_view request_id);
  ~RequestLogScope();
  RequestLogScope(const RequestLogScope&) = delete;
  RequestLogScope& operator=(const RequestLogScope&) = delete;

 private:
  const absl::string_view previous_;
};

// The id of the innermost RequestLogScope on this thread; empty when none.
absl::string_view CurrentRequestId();

}  // namespace coalesce
