// The one conversion from the format library's leapcache::Status to absl::Status.
//
// gpu/ cannot depend on Abseil, so it has its own Status whose codes are numbered like
// absl::StatusCode (format_status.cc asserts it); FromFormatStatus is the only place that
// crosses the two.
#pragma once

#include "absl/status/status.h"
#include "gpu/format/status.h"

namespace leapcache::base {

// Same code, same message. An OK status converts to absl::OkStatus().
absl::Status FromFormatStatus(const leapcache::Status& status);

}  // namespace leapcache::base
