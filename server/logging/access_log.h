// The access log (--access_log): one line per call, gRPC or REST, naming
// who called what, how it ended, its sizes and where its time went.
//
// Lines are written by a thread of the log's own (spdlog's async logger), so
// a request never waits for the disk; the queue between is bounded. When it
// is full the oldest queued line is dropped, and the drops are counted and
// logged as a warning (every 10 s while they happen, and at Close) so that
// none goes unnoticed.
//
// Thread-safety: Write, Reopen and dropped from any thread; Close once (not
// while dropped or Reopen runs), after which Write does nothing.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "server/logging/log.h"
#include "spdlog/async_logger.h"

namespace coalesce {

struct AccessRecord {
  std::string request_id;
  // The full gRPC method ("/coalesce.v1.TensorOps/Transpose"), or the HTTP
  // method and path ("POST /v2/models/transpose/infer").
  std::string method;
  // The gRPC status code's name ("OK", "INVALID_ARGUMENT"), or the HTTP
  // status's ("OK", "NOT_FOUND").
  std::string code;
  int http_status = 0;  // REST only; 0 on gRPC
  // Who the server took the caller for (server/auth/); empty when it was
  // not decided (authentication failed, or a call the service does not
  // authenticate).
  std::string identity;
  std::string peer;  // the client's address, as gRPC or civetweb name it
  // Serialized request and response messages (gRPC; all of a stream's), or
  // body bytes (REST); -1: not known.
  int64_t request_bytes = -1;
  int64_t response_bytes = -1;
  // Where the call ran a kernel: from entry until the launch began (the
  // device queue included), and the kernel's own time.
  std::optional<double> queue_seconds;
  std::optional<double> kernel_seconds;
  double duration_seconds = 0;  // entry to the status sent
};

// record as the access logger's payload (LogPayload::kFields): key=value
// pairs in text, the value JSON-quoted where it holds a space, '"', '=' or a
// character that is not visible ASCII, and "-" for an empty one; in json,
// the members "msg" (method and code), request_id, method, code,
// http_status, identity, peer, request_bytes, response_bytes, queue_ms,
// kernel_ms and duration_ms, those not known left out.
std::string FormatAccessFields(const AccessRecord& record, LogFormat format);

class AccessLog {
 public:
  // target: "stderr", or a file path, opened for appending (created, with
  // its folders, when missing). queue_lines: lines that may wait for the
  // writer.
  static absl::StatusOr<std::unique_ptr<AccessLog>> Open(
      const std::string& target, LogFormat format, size_t queue_lines = 8192);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  void Write(const AccessRecord& record);
  // Lines dropped because the queue was full, so far.
  size_t dropped() const;
  // Whether the log writes a file (not stderr): what Reopen acts on.
  bool writes_file() const { return file_ != nullptr; }
  // Opens the file at the path again, for appending (created when missing):
  // after a log rotation moved it, later lines go to a new file there.
  // Lines still queued go to the new file too. OK and nothing done for
  // stderr; UNAVAILABLE naming the path when it cannot be opened, and
  // lines are then lost until a Reopen succeeds.
  absl::Status Reopen();
  // Writes what is queued, flushes, and logs how many lines were dropped
  // since the last warning. The destructor closes too.
  void Close();

 private:
  class FileSink;
  AccessLog(std::shared_ptr<spdlog::details::thread_pool> pool,
            std::shared_ptr<spdlog::async_logger> logger,
            std::shared_ptr<FileSink> file, LogFormat format);
  void ReportDrops();

  const LogFormat format_;
  std::shared_ptr<FileSink> file_;  // null for stderr
  std::shared_ptr<spdlog::details::thread_pool> pool_;
  std::shared_ptr<spdlog::async_logger> logger_;
  std::atomic<bool> closed_{false};
  std::atomic<size_t> reported_{0};
  absl::Notification stop_;
  std::thread reporter_;
};

}  // namespace coalesce
