#include "server/logging/request_id.h"

#include <cstdint>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"

namespace coalesce {
namespace {

bool LowerHex(absl::string_view s) {
  for (const char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(absl::string_view s) {
  return s.find_first_not_of('0') == absl::string_view::npos;
}

}  // namespace

bool ValidRequestId(absl::string_view value) {
  if (value.empty() || value.size() > kMaxRequestIdLength) return false;
  for (const char c : value) {
    if (c < 0x21 || c > 0x7E) return false;
  }
  return true;
}

std::optional<std::string> TraceIdOf(absl::string_view traceparent) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
  constexpr size_t kLength = 55;
  if (traceparent.size() < kLength) return std::nullopt;
  const absl::string_view version = traceparent.substr(0, 2);
  const absl::string_view trace_id = traceparent.substr(3, 32);
  const absl::string_view parent_id = traceparent.substr(36, 16);
  const absl::string_view flags = traceparent.substr(53, 2);
  if (traceparent[2] != '-' || traceparent[35] != '-' ||
      traceparent[52] != '-' || !LowerHex(version) || version == "ff" ||
      !LowerHex(trace_id) || AllZero(trace_id) || !LowerHex(parent_id) ||
      AllZero(parent_id) || !LowerHex(flags)) {
    return std::nullopt;
  }
  if (traceparent.size() > kLength &&
      (version == "00" || traceparent[kLength] != '-')) {
    return std::nullopt;
  }
  return std::string(trace_id);
}

std::string NewRequestId() {
  thread_local absl::BitGen bits;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(bits),
                         absl::Uniform<uint64_t>(bits));
}

std::string ResolveRequestId(absl::string_view x_request_id,
                             absl::string_view traceparent) {
  if (ValidRequestId(x_request_id)) return std::string(x_request_id);
  if (std::optional<std::string> trace_id = TraceIdOf(traceparent)) {
    return *std::move(trace_id);
  }
  return NewRequestId();
}

}  // namespace coalesce
