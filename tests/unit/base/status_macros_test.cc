#include "base/format_status.h"
#include "base/status_macros.h"

#include <gtest/gtest.h>

#include "absl/status/statusor.h"

namespace leapcache::base {
namespace {

TEST(StatusUtilTest, ConvertsCodeAndMessage) {
  EXPECT_TRUE(FromFormatStatus(leapcache::OkStatus()).ok());
  const absl::Status st = FromFormatStatus(leapcache::DataLossError("payload crc"));
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(st.message(), "payload crc");
  EXPECT_EQ(FromFormatStatus(leapcache::InvalidArgumentError("x")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FromFormatStatus(leapcache::NotFoundError("x")).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FromFormatStatus(leapcache::OutOfRangeError("x")).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(FromFormatStatus(leapcache::InternalError("x")).code(), absl::StatusCode::kInternal);
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status Quarter(int x, int* out) {
  LC_ASSIGN_OR_RETURN(int h, Half(x));
  LC_ASSIGN_OR_RETURN(*out, Half(h));
  LC_RETURN_IF_ERROR(absl::OkStatus());
  return absl::OkStatus();
}

TEST(StatusUtilTest, MacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(Quarter(6, &out).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leapcache::base
