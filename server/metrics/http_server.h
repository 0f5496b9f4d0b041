// Serves a Registry's exposition over HTTP for Prometheus to scrape: GET (or
// HEAD) /metrics answers text format 0.0.4. For orchestrators without gRPC
// probes, /healthz answers 200 while the process serves HTTP at all
// (liveness) and /readyz 200 while `ready` says OK, else 503 with its
// message (readiness: starting, draining, or a device fault). Every other
// path is 404, other methods 405. Built on civetweb (Debian's libcivetweb) with
// two worker threads: scrapes are rare and a scrape serializes under the
// Registry's lock anyway. IPv4 only (Debian's civetweb is built without IPv6).
//
// Thread-safety: Start and the destructor from one thread; the server
// answers from its own threads. The Registry must outlive the server.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/metrics/registry.h"

struct mg_connection;
struct mg_context;

namespace coalesce::metrics {

class HttpServer {
 public:
  // Listens on address ("HOST:PORT"; port 0 picks a free port, see port()).
  // UNAVAILABLE when the address cannot be bound.
  // ready is called on each /readyz (from the server's threads); empty:
  // always ready.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      absl::string_view address, const Registry* registry,
      std::function<absl::Status()> ready = nullptr);

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  // Stops listening and waits for requests being answered.
  ~HttpServer();

  // The TCP port actually bound.
  int port() const { return port_; }

 private:
  HttpServer(const Registry* registry, std::function<absl::Status()> ready)
      : registry_(registry), ready_(std::move(ready)) {}
  static int HandleReady(struct mg_connection* conn, void* self);

  const Registry* const registry_;
  const std::function<absl::Status()> ready_;
  mg_context* context_ = nullptr;
  int port_ = 0;
};

}  // namespace coalesce::metrics
