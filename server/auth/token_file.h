// Bearer tokens from a file (--auth_tokens): one line per token,
//
//   TOKEN IDENTITY ROLE      # role: user or admin
//
// with '#' comments and blank lines. The server answers a call that carries
// `authorization: Bearer TOKEN` as IDENTITY with ROLE. Tokens are secrets:
// no error message ever quotes one, only its line number.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coalesce {

// user: ops, tensors and regions. admin: also what spends GPU time on
// the server's behalf (tuning, ExplainSelection's measure).
enum class Role { kUser, kAdmin };

absl::string_view RoleName(Role role);

struct TokenEntry {
  std::string token;
  std::string identity;
  Role role = Role::kUser;
};

struct TokenTable {
  std::vector<TokenEntry> entries;
};

// Tokens are 16 to 256 printable ASCII characters other than '#' (so that a
// guessable token is refused at start-up); identities 1 to 64 characters of
// [A-Za-z0-9._@-]. A token may appear once; an identity may have several
// tokens (rotation), all of one role. INVALID_ARGUMENT naming the line.
absl::StatusOr<TokenTable> ParseTokenFile(absl::string_view text);

// Reads and parses path. Files larger than 1 MiB are refused.
absl::StatusOr<TokenTable> LoadTokenFile(const std::string& path);

// Whether name is a valid identity (also for identities from certificates).
bool ValidIdentity(absl::string_view name);

}  // namespace coalesce
