// TuningStore::Parse on arbitrary text, for the reader of one build and
// device: a tuning cache names that build, a shipped tuning table "any"
// (the corpus has both). Checked beyond not crashing: a failed parse
// leaves the store empty; a parsed store serializes to text that parses
// again into the same entries and serializes identically.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "kernels/selection/tuning_store.h"

namespace coalesce {
namespace {

TuningIdentity Reader() {
  return {"0a1b2c3", "NVIDIA H200|9.0", "gemm=v1,transpose=v2"};
}

void CheckSameEntries(const TuningStore& a, const TuningStore& b) {
  FUZZ_CHECK(a.Keys() == b.Keys(), a.size(), " vs ", b.size(), " keys");
  for (const std::string& key : a.Keys()) {
    const auto x = a.Lookup(key);
    const auto y = b.Lookup(key);
    FUZZ_CHECK(x != nullptr && y != nullptr, "key ", key);
    FUZZ_CHECK(x->winner == y->winner, "winner of ", key);
    FUZZ_CHECK(x->measured.size() == y->measured.size(), "measured of ", key);
    for (size_t i = 0; i < x->measured.size(); ++i) {
      FUZZ_CHECK(x->measured[i].first == y->measured[i].first, "name ", i,
                 " of ", key);
    }
  }
}

void FuzzOne(absl::string_view text) {
  TuningStore store(Reader());
  const std::string empty = store.Serialize();
  const absl::Status parsed = store.Parse(text);
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.code() == absl::StatusCode::kInvalidArgument ||
                   parsed.code() == absl::StatusCode::kFailedPrecondition,
               parsed.ToString());
    FUZZ_CHECK(store.size() == 0 && store.Serialize() == empty,
               "a failed parse changed the store");
    return;
  }
  for (const std::string& key : store.Keys()) {
    const auto choice = store.Lookup(key);
    FUZZ_CHECK(choice != nullptr && !choice->winner.empty(), "key ", key);
  }
  const std::string text1 = store.Serialize();
  TuningStore again(Reader());
  const absl::Status reparsed = again.Parse(text1);
  FUZZ_CHECK(reparsed.ok(), reparsed.ToString(), "\n", text1);
  CheckSameEntries(store, again);
  const std::string text2 = again.Serialize();
  FUZZ_CHECK(text1 == text2, "serialized twice differently:\n", text1, "\n",
             text2);
}

}  // namespace
}  // namespace coalesce

COALESCE_FUZZ_TARGET(coalesce::FuzzOne)
