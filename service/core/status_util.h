// Status helpers of the cache core: the one conversion from the format library's
// leapcache::Status to absl::Status, and the two propagation macros Abseil 20220623 lacks.
//
// gpu/ cannot depend on Abseil, so it has its own Status whose codes are numbered like
// absl::StatusCode; FromFormatStatus is the only place that crosses the two.
#pragma once

#include "absl/status/status.h"
#include "gpu/status.h"

namespace leapcache::core {

// Same code, same message. An OK status converts to absl::OkStatus().
absl::Status FromFormatStatus(const leapcache::Status& status);

}  // namespace leapcache::core

#define LC_CONCAT_INNER_(a, b) a##b
#define LC_CONCAT_(a, b) LC_CONCAT_INNER_(a, b)

// Returns the absl::Status of `expr` from the enclosing function when it is not OK.
#define LC_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status lc_status_ = (expr);      \
    if (!lc_status_.ok()) return lc_status_; \
  } while (0)

#define LC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// `lhs = value of expr` (an absl::StatusOr), or returns its status from the enclosing function.
#define LC_ASSIGN_OR_RETURN(lhs, expr) \
  LC_ASSIGN_OR_RETURN_IMPL_(LC_CONCAT_(lc_status_or_, __LINE__), lhs, expr)
