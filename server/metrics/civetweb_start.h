// Starting a civetweb server the way both of the server's HTTP endpoints
// (the metrics port, the KServe REST port) do it. IPv4 only (Debian's
// civetweb is built without IPv6).
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct mg_connection;
struct mg_context;

namespace coalesce::metrics {

struct CivetwebListener {
  mg_context* context = nullptr;  // mg_stop it
  int port = 0;                   // the TCP port actually bound
};

// Listens on address ("HOST:PORT"; port 0 picks a free port) with workers
// threads, a request that is not complete after request_timeout_ms closed,
// and civetweb's log lines sent to log. No handler is set yet. UNAVAILABLE
// naming what ("metrics", "HTTP") when the address cannot be bound.
absl::StatusOr<CivetwebListener> StartCivetweb(
    absl::string_view address, absl::string_view what, int workers,
    int request_timeout_ms,
    int (*log)(const mg_connection* conn, const char* message));

}  // namespace coalesce::metrics
