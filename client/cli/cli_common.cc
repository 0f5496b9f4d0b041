#include "client/cli/cli_common.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace coalesce::cli {
namespace {

constexpr absl::string_view kUsagePayload = "type.coalesce.dev/cli.usage";

}  // namespace

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

absl::StatusOr<std::vector<int64_t>> ParseInts(absl::string_view flag,
                                               absl::string_view text) {
  std::vector<int64_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return UsageError(absl::StrCat("--", flag, "=", text,
                                     ": expected comma-separated integers"));
    }
    values.push_back(v);
  }
  return values;
}

std::string FormatBytes(double bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit + 1 < 5) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrFormat(unit == 0 ? "%.0f %s" : "%.2f %s", bytes,
                         kUnits[unit]);
}

}  // namespace coalesce::cli
