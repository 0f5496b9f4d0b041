// ParseTokenFile (server/auth/token_file.h) on arbitrary text. Checked
// beyond not crashing: a parsed table has one entry per line that is not
// blank or a comment, every token and identity valid, tokens distinct and
// one role per identity, and written back as "TOKEN IDENTITY ROLE" lines it
// parses into the same table. An error is INVALID_ARGUMENT, names a line
// of the file, stays short, and never quotes a token.
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/quote.h"
#include "fuzz/fuzz_check.h"
#include "server/auth/token_file.h"

namespace coalesce {
namespace {

constexpr size_t kMaxMessageBytes = 1024;

// The fields of each line, as the format defines them: '#' starts a
// comment, fields are separated by spaces, tabs and carriage returns.
std::vector<std::vector<absl::string_view>> Lines(absl::string_view text) {
  std::vector<std::vector<absl::string_view>> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = line.substr(0, line.find('#'));
    lines.push_back(
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty()));
  }
  return lines;
}

void CheckError(const absl::Status& status,
                const std::vector<std::vector<absl::string_view>>& lines) {
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument,
             status.ToString());
  const absl::string_view message = status.message();
  FUZZ_CHECK(message.size() <= kMaxMessageBytes, message.size(), " bytes");
  absl::string_view rest = message;
  FUZZ_CHECK(absl::ConsumePrefix(&rest, "token file line "), message);
  size_t line = 0;
  const absl::string_view digits = rest.substr(0, rest.find(':'));
  FUZZ_CHECK(
      absl::SimpleAtoi(digits, &line) && line >= 1 && line <= lines.size(),
      message);
  // The message may quote the failing line's other fields (escaped), but
  // never a token: a token of any line may appear only inside one of those.
  const std::vector<absl::string_view>& failing = lines[line - 1];
  for (const auto& fields : lines) {
    if (fields.empty() || fields[0].size() < 16) continue;
    bool quoted = false;
    for (size_t i = 1; i < failing.size() && !quoted; ++i) {
      quoted = absl::StrContains(Quoted(failing[i]), fields[0]);
    }
    if (!quoted) {
      FUZZ_CHECK(!absl::StrContains(message, fields[0]),
                 "the message quotes a token: ", message);
    }
  }
}

void FuzzOne(absl::string_view text) {
  const auto lines = Lines(text);
  const absl::StatusOr<TokenTable> table = ParseTokenFile(text);
  if (!table.ok()) {
    CheckError(table.status(), lines);
    return;
  }
  size_t entries = 0;
  for (const auto& fields : lines) entries += fields.empty() ? 0 : 1;
  FUZZ_CHECK(table->entries.size() == entries, table->entries.size(),
             " entries from ", entries, " lines");
  std::set<std::string> tokens;
  std::map<std::string, Role> roles;
  std::string written;
  for (const TokenEntry& e : table->entries) {
    FUZZ_CHECK(e.token.size() >= 16 && e.token.size() <= 256, "token length ",
               e.token.size());
    for (char c : e.token) {
      FUZZ_CHECK(c > ' ' && c <= '~' && c != '#', "token character ",
                 static_cast<int>(c));
    }
    FUZZ_CHECK(ValidIdentity(e.identity), "identity ", e.identity);
    FUZZ_CHECK(tokens.insert(e.token).second, "a token twice");
    const auto [it, inserted] = roles.emplace(e.identity, e.role);
    FUZZ_CHECK(inserted || it->second == e.role, "two roles for ", e.identity);
    absl::StrAppend(&written, e.token, " ", e.identity, " ", RoleName(e.role),
                    "\n");
  }
  const absl::StatusOr<TokenTable> again = ParseTokenFile(written);
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->entries.size() == table->entries.size(), "entries");
  for (size_t i = 0; i < again->entries.size(); ++i) {
    const TokenEntry& a = table->entries[i];
    const TokenEntry& b = again->entries[i];
    FUZZ_CHECK(
        a.token == b.token && a.identity == b.identity && a.role == b.role,
        "entry ", i, " written back differs");
  }
}

}  // namespace
}  // namespace coalesce

COALESCE_FUZZ_TARGET(coalesce::FuzzOne)
