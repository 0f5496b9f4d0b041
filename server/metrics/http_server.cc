#include "server/metrics/http_server.h"

#include <civetweb.h>
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/metrics/civetweb_start.h"
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

constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr int kWorkers = 32;
constexpr int kRequestTimeoutMs = 5000;

// civetweb logs through this instead of to stderr on its own.
int LogMessage(const mg_connection* /*conn*/, const char* message) {
  spdlog::warn("metrics http: {}", message);
  return 1;
}

// GET or HEAD, else 405 (answered here); true when the request may go on.
bool GetOrHead(mg_connection* conn, bool* head) {
  const mg_request_info* request = mg_get_request_info(conn);
  *head = std::strcmp(request->request_method, "HEAD") == 0;
  if (!*head && std::strcmp(request->request_method, "GET") != 0) {
    mg_send_http_error(conn, 405, "%s", "only GET and HEAD\n");
    return false;
  }
  return true;
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

int HandleHealth(mg_connection* conn, void* /*data*/) {
  bool head = false;
  if (!GetOrHead(conn, &head)) return 405;
  return SendText(conn, 200, head, "ok\n");
}

int HandleMetrics(mg_connection* conn, void* data) {
  const auto* registry = static_cast<const Registry*>(data);
  bool head = false;
  if (!GetOrHead(conn, &head)) return 405;
  const std::string body = registry->Serialize();
  mg_send_http_ok(conn, kContentType, static_cast<long long>(body.size()));
  if (!head) mg_write(conn, body.data(), body.size());
  return 200;
}

}  // namespace

int HttpServer::HandleReady(mg_connection* conn, void* self) {
  bool head = false;
  if (!GetOrHead(conn, &head)) return 405;
  const auto& ready = static_cast<const HttpServer*>(self)->ready_;
  const absl::Status status = ready ? ready() : absl::OkStatus();
  if (status.ok()) return SendText(conn, 200, head, "ready\n");
  return SendText(conn, 503, head,
                  absl::StrCat("not ready: ", status.message(), "\n"));
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    absl::string_view address, const Registry* registry,
    std::function<absl::Status()> ready) {
  // A client that opens a request and never finishes it holds a worker
  // until request_timeout_ms: with 2 workers, two such clients kept every
  // scrape waiting 10 s. kWorkers leaves scrapes a worker while that many
  // minus one hold half-open requests (http_server_test: 16 of them), and a
  // larger flood delays a scrape by at most the timeout.
  COALESCE_ASSIGN_OR_RETURN(const CivetwebListener listener,
                            StartCivetweb(address, "metrics", kWorkers,
                                          kRequestTimeoutMs, LogMessage));
  auto server =
      std::unique_ptr<HttpServer>(new HttpServer(registry, std::move(ready)));
  server->context_ = listener.context;
  server->port_ = listener.port;
  mg_set_request_handler(server->context_, "/metrics$", HandleMetrics,
                         const_cast<Registry*>(registry));
  mg_set_request_handler(server->context_, "/healthz$", HandleHealth, nullptr);
  mg_set_request_handler(server->context_, "/readyz$", &HttpServer::HandleReady,
                         server.get());
  return server;
}

HttpServer::~HttpServer() {
  if (context_ != nullptr) mg_stop(context_);
}

}  // namespace coalesce::metrics
