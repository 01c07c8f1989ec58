// leapcache::Status / StatusOr: the error type of the state-format library.
//
// gpu/ must build with the CUDA toolkit and GoogleTest alone, so it cannot use Abseil. The codes
// and their numbering are those of absl::StatusCode (and gRPC), so the service converts with one
// static_cast in exactly one place. A Status carries a message that names the bad argument.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace leapcache {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 3,
  kNotFound = 5,
  kFailedPrecondition = 9,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kDataLoss = 15,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: dk must be a multiple of 16 (got 100)".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status OutOfRangeError(std::string m) {
  return Status(StatusCode::kOutOfRange, std::move(m));
}
inline Status DataLossError(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

// A value or the error that prevented it. REQUIRES: a StatusOr built from a Status is not OK.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // An OK status carries no value: it becomes INTERNAL rather than an empty "success".
  StatusOr(Status status)  // NOLINT
      : status_(status.ok() ? Status(StatusCode::kInternal, "StatusOr built from an OK status")
                            : std::move(status)) {}
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace leapcache

#define LEAPCACHE_CONCAT_INNER_(a, b) a##b
#define LEAPCACHE_CONCAT_(a, b) LEAPCACHE_CONCAT_INNER_(a, b)

#define LEAPCACHE_RETURN_IF_ERROR(expr)                    \
  do {                                                     \
    ::leapcache::Status _leapcache_status = (expr);        \
    if (!_leapcache_status.ok()) return _leapcache_status; \
  } while (0)

#define LEAPCACHE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return tmp.status();                    \
  lhs = std::move(tmp).value()

#define LEAPCACHE_ASSIGN_OR_RETURN(lhs, expr) \
  LEAPCACHE_ASSIGN_OR_RETURN_IMPL_(LEAPCACHE_CONCAT_(_leapcache_or_, __LINE__), lhs, expr)
