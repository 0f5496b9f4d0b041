#include "base/quote.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace coalesce {

std::string Quoted(absl::string_view s) {
  if (s.size() <= kMaxQuotedBytes) {
    return absl::StrCat("'", absl::CHexEscape(s), "'");
  }
  return absl::StrCat("'", absl::CHexEscape(s.substr(0, kMaxQuotedBytes)),
                      "...' (", s.size(), " bytes)");
}

}  // namespace coalesce
