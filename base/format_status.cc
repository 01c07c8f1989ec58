#include "base/format_status.h"

namespace leapcache::base {

absl::Status FromFormatStatus(const leapcache::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // gpu/format/status.h numbers its codes as absl::StatusCode does (static_asserts below say so).
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(status.code())),
                      status.message());
}

#define LC_SAME_CODE_(ours, absl_code)                             \
  static_assert(static_cast<int>(leapcache::StatusCode::ours) ==   \
                    static_cast<int>(absl::StatusCode::absl_code), \
                "leapcache::StatusCode::" #ours " must equal absl::StatusCode::" #absl_code)
LC_SAME_CODE_(kOk, kOk);
LC_SAME_CODE_(kInvalidArgument, kInvalidArgument);
LC_SAME_CODE_(kNotFound, kNotFound);
LC_SAME_CODE_(kFailedPrecondition, kFailedPrecondition);
LC_SAME_CODE_(kOutOfRange, kOutOfRange);
LC_SAME_CODE_(kUnimplemented, kUnimplemented);
LC_SAME_CODE_(kInternal, kInternal);
LC_SAME_CODE_(kDataLoss, kDataLoss);
#undef LC_SAME_CODE_

}  // namespace leapcache::base
