// JSON string escaping for the structured logs (--log_format=json): every
// message, identity or path a line carries may hold quotes, backslashes,
// control characters or bytes that are not UTF-8, and the line must still be
// one valid JSON object.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace coalesce {

// Appends text to out as the inside of a JSON string (no quotes added): '"'
// and '\\' escaped, \b \f \n \r \t as such, other control characters and
// DEL as \u00XX, and each byte that is not part of valid UTF-8 as \ufffd
// (the replacement character), so that out stays valid UTF-8.
void AppendJsonEscaped(absl::string_view text, std::string* out);

// text as a JSON string, quotes included.
std::string JsonString(absl::string_view text);

}  // namespace coalesce
