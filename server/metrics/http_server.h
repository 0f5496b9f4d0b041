// The metrics port: prometheus-cpp's Exposer serves GET /metrics (text
// format 0.0.4, gzip when the scraper accepts it) from a Collectable. For
// orchestrators without gRPC probes, the same port answers /healthz with
// 200 while the process serves HTTP at all (liveness) and /readyz with 200
// while `ready` says OK, else 503 with its message (readiness: starting,
// draining, or a device fault). Other paths are 404; methods other than GET
// (and HEAD on the health paths) are 405. IPv4 only (Debian's civetweb is
// built without IPv6).
//
// Thread-safety: Start and the destructor from one thread; the server
// answers from its own threads. The Collectable may go before the server
// (it is held weakly); `ready` must outlive it.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

struct mg_connection;

namespace coalesce::metrics {

class HttpServer {
 public:
  // Listens on address ("HOST:PORT"; port 0 picks a free port, see port()).
  // UNAVAILABLE naming the address when it cannot be bound. ready is called
  // on each /readyz (from the server's threads); empty: always ready.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      absl::string_view address, std::weak_ptr<prometheus::Collectable> metrics,
      std::function<absl::Status()> ready = nullptr);

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  // Stops listening and waits for requests being answered.
  ~HttpServer();

  // The TCP port actually bound.
  int port() const { return port_; }

 private:
  explicit HttpServer(std::function<absl::Status()> ready)
      : ready_(std::move(ready)) {}
  // civetweb's begin_request: answers the health paths and refused methods
  // (returns their status), leaves the rest to the Exposer (returns 0).
  static int BeginRequest(mg_connection* conn);

  const std::function<absl::Status()> ready_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace coalesce::metrics
