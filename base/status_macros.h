// Status helpers missing from Debian's Abseil (20220623 has no status macros).
// Thread-safe: macros only.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define COALESCE_CONCAT_INNER_(a, b) a##b
#define COALESCE_CONCAT_(a, b) COALESCE_CONCAT_INNER_(a, b)

#define COALESCE_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    ::absl::Status _coalesce_status = (expr);            \
    if (!_coalesce_status.ok()) return _coalesce_status; \
  } while (0)

#define COALESCE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()

#define COALESCE_ASSIGN_OR_RETURN(lhs, expr) \
  COALESCE_ASSIGN_OR_RETURN_IMPL_(           \
      COALESCE_CONCAT_(_coalesce_statusor_, __LINE__), lhs, expr)
