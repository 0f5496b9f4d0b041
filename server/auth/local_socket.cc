#include "server/auth/local_socket.h"

#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace coalesce {

absl::StatusOr<std::unique_ptr<LocalSocketListener>> LocalSocketListener::Start(
    const std::string& path, grpc::Server* server, PeerCredentials* peers) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--unix_socket: the path must be 1 to ", sizeof(address.sun_path) - 1,
        " bytes, not ", path.size()));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--unix_socket: '", path, "' exists and is not a socket"));
    }
    unlink(path.c_str());
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("--unix_socket: socket: ", std::strerror(errno)));
  }
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) !=
          0 ||
      chmod(path.c_str(), 0666) != 0 || listen(fd, 128) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("--unix_socket: cannot serve on '", path, "': ", why));
  }
  const int stop = eventfd(0, EFD_CLOEXEC);
  if (stop < 0) {
    close(fd);
    unlink(path.c_str());
    return absl::InternalError(
        absl::StrCat("--unix_socket: eventfd: ", std::strerror(errno)));
  }
  auto listener = std::unique_ptr<LocalSocketListener>(
      new LocalSocketListener(path, fd, stop, server, peers));
  listener->thread_ = std::thread([l = listener.get()] { l->AcceptLoop(); });
  return listener;
}

LocalSocketListener::LocalSocketListener(std::string path, int listen_fd,
                                         int stop_fd, grpc::Server* server,
                                         PeerCredentials* peers)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      stop_fd_(stop_fd),
      server_(server),
      peers_(peers) {}

LocalSocketListener::~LocalSocketListener() {
  const uint64_t one = 1;
  if (write(stop_fd_, &one, sizeof(one)) < 0) {
    spdlog::warn("local socket: cannot signal the accept thread: {}",
                 std::strerror(errno));
  }
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(stop_fd_);
  unlink(path_.c_str());
}

void LocalSocketListener::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("local socket: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors or a peer gone before accept: the listener
      // lives on; the peer sees its connection refused or reset.
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        spdlog::warn("local socket: accept: {}", std::strerror(errno));
      }
      continue;
    }
    ucred peer{};
    socklen_t size = sizeof(peer);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
      spdlog::warn("local socket: SO_PEERCRED: {}", std::strerror(errno));
      close(fd);
      continue;
    }
    // Recorded before gRPC sees the descriptor, so that no call on it is
    // served without its uid.
    peers_->Set(fd, peer.uid);
    grpc::AddInsecureChannelFromFd(server_, fd);
  }
}

}  // namespace coalesce
