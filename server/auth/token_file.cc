#include "server/auth/token_file.h"

#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/quote.h"

namespace coalesce {
namespace {

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 256;
constexpr size_t kMaxIdentityLength = 64;
constexpr int64_t kMaxFileBytes = int64_t{1} << 20;

bool ValidToken(absl::string_view token) {
  if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) {
    return false;
  }
  for (char c : token) {
    if (c <= ' ' || c > '~' || c == '#') return false;
  }
  return true;
}

}  // namespace

absl::string_view RoleName(Role role) {
  return role == Role::kAdmin ? "admin" : "user";
}

bool ValidIdentity(absl::string_view name) {
  if (name.empty() || name.size() > kMaxIdentityLength) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '@' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<TokenTable> ParseTokenFile(absl::string_view text) {
  TokenTable table;
  absl::flat_hash_set<std::string> tokens;
  absl::flat_hash_map<std::string, Role> roles;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    const std::string where = absl::StrCat("token file line ", line_number);
    if (fields.size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected 'TOKEN IDENTITY ROLE', found ",
                       fields.size(), " fields"));
    }
    if (!ValidToken(fields[0])) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the token must be ", kMinTokenLength, " to ",
          kMaxTokenLength, " printable characters without spaces or '#'"));
    }
    if (!ValidIdentity(fields[1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": identity ", Quoted(fields[1]), " must be 1 to ",
          kMaxIdentityLength, " characters of [A-Za-z0-9._@-]"));
    }
    Role role;
    if (fields[2] == "user") {
      role = Role::kUser;
    } else if (fields[2] == "admin") {
      role = Role::kAdmin;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": role ", Quoted(fields[2]), " must be user or admin"));
    }
    if (!tokens.insert(std::string(fields[0])).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": this token already appears on an earlier line"));
    }
    const auto [it, inserted] = roles.emplace(std::string(fields[1]), role);
    if (!inserted && it->second != role) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": identity ", Quoted(fields[1]),
          " has another role on an earlier line; one identity has one role"));
    }
    table.entries.push_back(
        {std::string(fields[0]), std::string(fields[1]), role});
  }
  return table;
}

absl::StatusOr<TokenTable> LoadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the token file ", Quoted(path)));
  }
  std::string text;
  text.resize(kMaxFileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(text.size()) > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", Quoted(path),
                                                   " is larger than ",
                                                   kMaxFileBytes, " bytes"));
  }
  absl::StatusOr<TokenTable> table = ParseTokenFile(text);
  if (!table.ok()) {
    return absl::Status(
        table.status().code(),
        absl::StrCat(Quoted(path), ": ", table.status().message()));
  }
  return table;
}

}  // namespace coalesce
