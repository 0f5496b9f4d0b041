// Who is calling, decided once per RPC at the service's edge.
//
// With authentication on (bearer tokens from --auth_tokens, or client
// certificates verified against --tls_client_ca), identity comes only from
// it: a call with neither gets UNAUTHENTICATED, and the x-coalesce-client
// metadata no longer counts. With it off, every caller is an admin and the
// identity is the caller's uid on the local socket, else the
// x-coalesce-client metadata, else the peer's address: convenient on a
// trusted host, forgeable anywhere else (the server warns at start-up when
// it listens beyond loopback without authentication).
//
// Connections accepted on the local Unix socket (local_socket.h) also carry
// the uid the kernel reported for the peer (SO_PEERCRED), which shared
// memory needs: an object is mapped only for the uid that owns it.
//
// Thread-safety: PeerCredentials and Authenticator are thread-safe.
#pragma once

#include <grpcpp/server_context.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/auth/token_file.h"

namespace coalesce {

struct Caller {
  std::string identity;
  Role role = Role::kAdmin;
  // The kernel-reported uid of a local-socket peer; nullopt over TCP.
  std::optional<uid_t> uid;
};

// The uid of each local-socket connection, by the descriptor gRPC serves it
// on (gRPC names such a peer "fd:N"). A descriptor is closed only after the
// calls on it are done, so an entry is never read for another connection.
class PeerCredentials {
 public:
  void Set(int fd, uid_t uid);
  // The uid of a peer named "fd:N", if that connection came through the
  // local socket.
  std::optional<uid_t> Lookup(absl::string_view peer) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, uid_t> uids_ ABSL_GUARDED_BY(mu_);
};

struct AuthOptions {
  // Bearer tokens; empty: none accepted.
  TokenTable tokens;
  // Identities from verified client certificates (their subject's common
  // name) are accepted: the server was given --tls_client_ca.
  bool client_certificates = false;
  // Certificate identities that get the admin role (others: user).
  std::vector<std::string> admin_identities;
};

class Authenticator {
 public:
  // peers may be null (no local socket); it must outlive the authenticator.
  Authenticator(AuthOptions options, const PeerCredentials* peers);

  // Tokens or client certificates are configured.
  bool enabled() const {
    return !options_.tokens.entries.empty() || options_.client_certificates;
  }

  // UNAUTHENTICATED (without echoing any token) when authentication is on
  // and the call proves no identity; INVALID_ARGUMENT for a malformed
  // x-coalesce-client when it is off. The identity is also noted on the
  // call's record for its access-log line (call_log.h).
  absl::StatusOr<Caller> Authenticate(
      const grpc::ServerContextBase& context) const;

 private:
  absl::StatusOr<Caller> Identify(const grpc::ServerContextBase& context) const;
  // The entry whose token equals presented, compared in time independent of
  // where they differ; null when none.
  const TokenEntry* FindToken(absl::string_view presented) const;

  const AuthOptions options_;
  const PeerCredentials* const peers_;
};

// PERMISSION_DENIED naming what needs the role when caller lacks it.
absl::Status Authorize(const Caller& caller, Role needed,
                       absl::string_view what);

}  // namespace coalesce
