#include "server/metrics/http_server.h"

#include <CivetServer.h>
#include <civetweb.h>
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/exposer.h"
#include "spdlog/spdlog.h"

// Debian's civetweb gives its threads fixed 100 KB stacks
// (pthread_attr_setstacksize), and every thread's static TLS comes out of its
// stack: OpenBLAS alone holds 61 KB of it, so a /metrics request overflowed
// the rest in mg_printf (seen: SIGSEGV in the CUDA build). This definition
// in the executable takes precedence over libc's for the shared libraries
// and raises any requested stack below 1 MiB to 1 MiB.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr,
                                         size_t stack_size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn real =
      reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kMinStack = size_t{1} << 20;
  return real(attr, std::max(stack_size, kMinStack));
}

namespace coalesce::metrics {
namespace {

// A client that opens a request and never finishes it holds a worker until
// the request timeout: kWorkers leaves scrapes a worker while that many
// minus one hold half-open requests (http_server_test: 16 of them), and a
// larger flood delays a scrape by at most the timeout.
constexpr int kWorkers = 32;
constexpr int kRequestTimeoutMs = 5000;

// civetweb logs through this instead of to stderr on its own.
int LogMessage(const mg_connection* /*conn*/, const char* message) {
  spdlog::warn("metrics http: {}", message);
  return 1;
}

// The Exposer's callbacks carry no user data: begin_request finds its
// server by the port the request came in on.
struct Servers {
  absl::Mutex mu;
  absl::flat_hash_map<int, const HttpServer*> by_port ABSL_GUARDED_BY(mu);
};
Servers& ServersByPort() {
  static Servers* servers = new Servers;
  return *servers;
}

int SendText(mg_connection* conn, int status, bool head,
             const std::string& body) {
  mg_response_header_start(conn, status);
  mg_response_header_add(conn, "Content-Type", "text/plain; charset=utf-8", -1);
  const std::string length = absl::StrCat(body.size());
  mg_response_header_add(conn, "Content-Length", length.c_str(), -1);
  mg_response_header_send(conn);
  if (!head) mg_write(conn, body.data(), body.size());
  return status;
}

}  // namespace

int HttpServer::BeginRequest(mg_connection* conn) {
  const mg_request_info* request = mg_get_request_info(conn);
  const bool head = std::strcmp(request->request_method, "HEAD") == 0;
  const bool get = std::strcmp(request->request_method, "GET") == 0;
  const std::string path = request->local_uri ? request->local_uri : "";
  if (path == "/metrics") {
    if (get) return 0;  // the Exposer's
    mg_send_http_error(conn, 405, "%s", "only GET\n");
    return 405;
  }
  // civetweb would give the Exposer every path below /metrics too.
  if (absl::StartsWith(path, "/metrics/")) {
    mg_send_http_error(conn, 404, "%s", "not found\n");
    return 404;
  }
  if (path != "/healthz" && path != "/readyz") return 0;  // 404
  if (!get && !head) {
    mg_send_http_error(conn, 405, "%s", "only GET and HEAD\n");
    return 405;
  }
  if (path == "/healthz") return SendText(conn, 200, head, "ok\n");
  Servers& servers = ServersByPort();
  // Held while ready runs, so that the server is not destroyed under it.
  absl::ReaderMutexLock lock(&servers.mu);
  const auto it = servers.by_port.find(request->server_port);
  absl::Status status = absl::UnavailableError("starting");
  if (it != servers.by_port.end()) {
    status = it->second->ready_ ? it->second->ready_() : absl::OkStatus();
  }
  if (status.ok()) return SendText(conn, 200, head, "ready\n");
  return SendText(conn, 503, head,
                  absl::StrCat("not ready: ", status.message(), "\n"));
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    absl::string_view address, std::weak_ptr<prometheus::Collectable> metrics,
    std::function<absl::Status()> ready) {
  auto server = std::unique_ptr<HttpServer>(new HttpServer(std::move(ready)));
  CivetCallbacks callbacks;
  callbacks.begin_request = &HttpServer::BeginRequest;
  callbacks.log_message = LogMessage;
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", std::string(address),
                                 "num_threads", absl::StrCat(kWorkers),
                                 "request_timeout_ms",
                                 absl::StrCat(kRequestTimeoutMs)},
        &callbacks);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on '", address, "': ", e.what(),
                     " (the address is malformed, in use or not local)"));
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.size() != 1) {
    return absl::UnavailableError(absl::StrCat("metrics on '", address,
                                               "': ", ports.size(),
                                               " ports bound, expected one"));
  }
  server->port_ = ports[0];
  server->exposer_->RegisterCollectable(metrics);
  Servers& servers = ServersByPort();
  absl::MutexLock lock(&servers.mu);
  servers.by_port[server->port_] = server.get();
  return server;
}

HttpServer::~HttpServer() {
  if (port_ != 0) {
    Servers& servers = ServersByPort();
    absl::MutexLock lock(&servers.mu);
    servers.by_port.erase(port_);
  }
  // The Exposer stops civetweb and joins its threads.
}

}  // namespace coalesce::metrics
