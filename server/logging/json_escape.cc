#include "server/logging/json_escape.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace coalesce {
namespace {

// The length of the valid UTF-8 sequence at the start of s, 0 when it is
// not one (overlong forms, surrogates and code points past U+10FFFF are
// not).
size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto continuation = [&](size_t i) {
    return i < s.size() && (byte(i) & 0xC0) == 0x80;
  };
  const uint8_t b0 = byte(0);
  if (b0 >= 0xC2 && b0 <= 0xDF) return continuation(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (b0 == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (b0 == 0xED && byte(1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (b0 == 0xF0 && byte(1) < 0x90) return 0;   // overlong
    if (b0 == 0xF4 && byte(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

void AppendJsonEscaped(absl::string_view text, std::string* out) {
  out->reserve(out->size() + text.size() + 2);
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(text.substr(i));
      if (n == 0) {
        out->append("\\ufffd");
        ++i;
      } else {
        out->append(text.data() + i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
}

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  AppendJsonEscaped(text, &out);
  out.push_back('"');
  return out;
}

}  // namespace coalesce
