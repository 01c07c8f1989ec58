// The two status propagation macros Abseil 20220623 lacks, for every library above gpu/.
#pragma once

#include <utility>

#include "absl/status/status.h"

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
