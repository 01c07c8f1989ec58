#include "gpu/format.h"

#include <gtest/gtest.h>

#include "gpu/crc32c.h"

namespace leapcache {
namespace {

TEST(Crc32c, CheckValue) { EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u); }

TEST(Layout, EightBitIsExactly1_1875BytesPerElement) {
  const BlobSpec s = BlobSpec::Leap(StateKind::kGdn, 8);
  ASSERT_TRUE(ValidateSpec(s).ok());
  EXPECT_EQ(ComputeLayout(s).payload_bytes, 19456u);
}

}  // namespace
}  // namespace leapcache
