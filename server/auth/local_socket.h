// The local listener (--unix_socket=PATH): gRPC over a Unix-domain socket,
// for clients on the same host. Each connection is accepted here, its
// peer's uid read from the kernel (SO_PEERCRED) into PeerCredentials, and
// then handed to the gRPC server, which serves it like any other. Shared
// memory is registered only over this socket, where the server knows whose
// process is asking.
//
// Thread-safety: one accept thread of its own; Start and the destructor are
// called from one thread.
#pragma once

#include <grpcpp/server.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/auth/authenticator.h"

namespace coalesce {

class LocalSocketListener {
 public:
  // Binds path (a socket file left by an earlier run is replaced; any other
  // file there is an error), mode 0666: any local user may connect, and is
  // known by uid. server and peers must outlive the listener.
  static absl::StatusOr<std::unique_ptr<LocalSocketListener>> Start(
      const std::string& path, grpc::Server* server, PeerCredentials* peers);
  // Stops accepting and removes the socket file; connections already handed
  // to gRPC stay with it.
  ~LocalSocketListener();

  LocalSocketListener(const LocalSocketListener&) = delete;
  LocalSocketListener& operator=(const LocalSocketListener&) = delete;

 private:
  LocalSocketListener(std::string path, int listen_fd, int stop_fd,
                      grpc::Server* server, PeerCredentials* peers);
  void AcceptLoop();

  const std::string path_;
  const int listen_fd_;
  const int stop_fd_;  // an eventfd the destructor signals
  grpc::Server* const server_;
  PeerCredentials* const peers_;
  std::thread thread_;
};

}  // namespace coalesce
