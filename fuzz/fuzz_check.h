// What the fuzz targets share: the entry point, an invariant check that
// reports what failed and aborts (libFuzzer then keeps the input as a
// crash), and a reader that cuts an input into length-prefixed records.
// Header-only; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

// FUZZ_CHECK(cond, detail, ...): aborts with cond and the StrCat of the
// details when cond is false.
#define FUZZ_CHECK(cond, ...)                              \
  do {                                                     \
    if (!(cond)) {                                         \
      ::coalesce::fuzz::Fail(__FILE__, __LINE__, #cond,    \
                             ::absl::StrCat(__VA_ARGS__)); \
    }                                                      \
  } while (0)

// COALESCE_FUZZ_TARGET(function): libFuzzer's entry point, handing every
// input to function(absl::string_view).
#define COALESCE_FUZZ_TARGET(function)                                      \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    function(absl::string_view(reinterpret_cast<const char*>(data), size)); \
    return 0;                                                               \
  }

namespace coalesce::fuzz {

[[noreturn]] inline void Fail(const char* file, int line, const char* cond,
                              const std::string& detail) {
  std::fprintf(stderr, "%s:%d: check failed: %s\n%s\n", file, line, cond,
               detail.c_str());
  std::abort();
}

// Cuts input into records, each a 2-byte little-endian length and that many
// bytes; a last record cut short keeps what there is.
class Records {
 public:
  explicit Records(absl::string_view input) : rest_(input) {}

  bool Next(absl::string_view* record) {
    if (rest_.size() < 2) return false;
    const size_t length = static_cast<uint8_t>(rest_[0]) |
                          static_cast<size_t>(static_cast<uint8_t>(rest_[1]))
                              << 8;
    rest_.remove_prefix(2);
    *record = rest_.substr(0, length);
    rest_.remove_prefix(record->size());
    return true;
  }

 private:
  absl::string_view rest_;
};

}  // namespace coalesce::fuzz
