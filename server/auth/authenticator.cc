#include "server/auth/authenticator.h"

#include <grpcpp/security/auth_context.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/quote.h"
#include "server/logging/call_log.h"

namespace coalesce {
namespace {

constexpr size_t kMaxClientIdLength = 128;

absl::string_view Metadata(const grpc::ServerContextBase& context,
                           absl::string_view key) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (it == metadata.end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

// Equal in time that depends only on the lengths.
bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

// The peer's address without its port, so that one host's reconnects are
// one client.
std::string PeerHost(const grpc::ServerContextBase& context) {
  std::string peer = context.peer();
  const size_t colon = peer.rfind(':');
  if (colon != std::string::npos && colon > peer.find(':')) {
    peer.resize(colon);
  }
  return peer;
}

}  // namespace

void PeerCredentials::Set(int fd, uid_t uid) {
  absl::MutexLock lock(&mu_);
  uids_[fd] = uid;
}

std::optional<uid_t> PeerCredentials::Lookup(absl::string_view peer) const {
  if (!absl::ConsumePrefix(&peer, "fd:")) return std::nullopt;
  int fd = -1;
  if (!absl::SimpleAtoi(peer, &fd)) return std::nullopt;
  absl::MutexLock lock(&mu_);
  const auto it = uids_.find(fd);
  if (it == uids_.end()) return std::nullopt;
  return it->second;
}

Authenticator::Authenticator(AuthOptions options, const PeerCredentials* peers)
    : options_(std::move(options)), peers_(peers) {}

const TokenEntry* Authenticator::FindToken(absl::string_view presented) const {
  // Every entry is compared, so that the time says nothing of which matched.
  const TokenEntry* found = nullptr;
  for (const TokenEntry& e : options_.tokens.entries) {
    if (ConstantTimeEqual(e.token, presented)) found = &e;
  }
  return found;
}

absl::StatusOr<Caller> Authenticator::Authenticate(
    const grpc::ServerContextBase& context) const {
  absl::StatusOr<Caller> caller = Identify(context);
  if (CallRecord* record = CallRecordOf(context);
      record != nullptr && caller.ok()) {
    record->identity = caller->identity;
  }
  return caller;
}

absl::StatusOr<Caller> Authenticator::Identify(
    const grpc::ServerContextBase& context) const {
  Caller caller;
  if (peers_ != nullptr) caller.uid = peers_->Lookup(context.peer());
  if (!enabled()) {
    caller.role = Role::kAdmin;
    const absl::string_view client_id = Metadata(context, "x-coalesce-client");
    if (!client_id.empty()) {
      if (client_id.size() > kMaxClientIdLength) {
        return absl::InvalidArgumentError(
            absl::StrCat("x-coalesce-client metadata: ", client_id.size(),
                         " bytes, more than ", kMaxClientIdLength));
      }
      caller.identity = std::string(client_id);
    } else if (caller.uid.has_value()) {
      caller.identity = absl::StrCat("uid:", *caller.uid);
    } else {
      caller.identity = PeerHost(context);
    }
    return caller;
  }
  if (!options_.tokens.entries.empty()) {
    absl::string_view authorization = Metadata(context, "authorization");
    if (!authorization.empty()) {
      // RFC 6750: the scheme is case-insensitive.
      if (authorization.size() < 7 ||
          !absl::EqualsIgnoreCase(authorization.substr(0, 7), "bearer ")) {
        return absl::UnauthenticatedError(
            "authorization metadata: expected 'Bearer TOKEN'");
      }
      const TokenEntry* entry =
          FindToken(absl::StripAsciiWhitespace(authorization.substr(7)));
      if (entry == nullptr) {
        return absl::UnauthenticatedError(
            "authorization metadata: the bearer token is not valid");
      }
      caller.identity = entry->identity;
      caller.role = entry->role;
      return caller;
    }
  }
  if (options_.client_certificates) {
    const std::shared_ptr<const grpc::AuthContext> auth =
        context.auth_context();
    if (auth != nullptr && auth->IsPeerAuthenticated()) {
      const std::vector<grpc::string_ref> names =
          auth->FindPropertyValues("x509_common_name");
      if (!names.empty()) {
        const absl::string_view name(names.front().data(),
                                     names.front().size());
        if (!ValidIdentity(name)) {
          return absl::UnauthenticatedError(absl::StrCat(
              "client certificate: common name ", Quoted(name),
              " is not a valid identity ([A-Za-z0-9._@-], 1 to 64)"));
        }
        caller.identity = std::string(name);
        const auto& admins = options_.admin_identities;
        caller.role =
            std::find(admins.begin(), admins.end(), name) != admins.end()
                ? Role::kAdmin
                : Role::kUser;
        return caller;
      }
    }
  }
  return absl::UnauthenticatedError(
      options_.tokens.entries.empty()
          ? "this server requires a client certificate"
      : options_.client_certificates
          ? "this server requires a bearer token (authorization: "
            "Bearer TOKEN) or a client certificate"
          : "this server requires a bearer token (authorization: "
            "Bearer TOKEN)");
}

absl::Status Authorize(const Caller& caller, Role needed,
                       absl::string_view what) {
  if (needed == Role::kAdmin && caller.role != Role::kAdmin) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, " needs the admin role; identity ",
                     Quoted(caller.identity), " has the user role"));
  }
  return absl::OkStatus();
}

}  // namespace coalesce
