#include "server/metrics/civetweb_start.h"

#include <civetweb.h>

#include <cstring>
#include <string>

#include "absl/base/call_once.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace coalesce::metrics {

absl::StatusOr<CivetwebListener> StartCivetweb(
    absl::string_view address, absl::string_view what, int workers,
    int request_timeout_ms,
    int (*log)(const mg_connection* conn, const char* message)) {
  // civetweb wants its process-wide state set up once, before mg_start.
  static absl::once_flag init_once;
  absl::call_once(init_once, [] { mg_init_library(0); });
  const std::string ports(address);
  const std::string threads = absl::StrCat(workers);
  const std::string timeout_ms = absl::StrCat(request_timeout_ms);
  const char* options[] = {
      "listening_ports",    ports.c_str(),      "num_threads", threads.c_str(),
      "request_timeout_ms", timeout_ms.c_str(), nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.log_message = log;
  mg_init_data init = {&callbacks, nullptr, options};
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error = {&error_code, error_text, sizeof(error_text)};
  CivetwebListener listener;
  listener.context = mg_start2(&init, &error);
  if (listener.context == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve ", what, " on '", address, "': ", error_text,
                     " (the address is malformed, in use or not local)"));
  }
  mg_server_port bound[1];
  if (mg_get_server_ports(listener.context, 1, bound) != 1) {
    mg_stop(listener.context);
    return absl::UnavailableError(
        absl::StrCat(what, " on '", address, "': no port bound"));
  }
  listener.port = bound[0].port;
  return listener;
}

}  // namespace coalesce::metrics
