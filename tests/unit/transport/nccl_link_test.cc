// NcclLink's argument checks (nccl_link.h), which run before NCCL or the device is touched: a
// malformed communicator id, rank or device is refused with INVALID_ARGUMENT naming it. The
// transfers themselves need two GPUs (tests/gpu/transport/nccl_session_test.cc).
#include <gtest/gtest.h>

#include <string>

#include "transport/nccl/nccl_link.h"

namespace leapcache::transport {
namespace {

TEST(NcclLink, RefusesAnIdThatIsNotAnNcclUniqueId) {
  for (const std::string& id : {std::string(), std::string(127, 'x'), std::string(129, 'x')}) {
    absl::StatusOr<std::unique_ptr<NcclLink>> link =
        NcclLink::Start(id, NcclLink::kEngineRank, 0, 0);
    EXPECT_EQ(link.status().code(), absl::StatusCode::kInvalidArgument) << id.size();
    EXPECT_NE(link.status().message().find("unique id"), std::string::npos) << link.status();
  }
}

TEST(NcclLink, RefusesARankOtherThanServiceOrEngine) {
  for (int rank : {-1, 2, 7}) {
    absl::StatusOr<std::unique_ptr<NcclLink>> link =
        NcclLink::Start(std::string(128, '\0'), rank, 0, 0);
    EXPECT_EQ(link.status().code(), absl::StatusCode::kInvalidArgument) << rank;
    EXPECT_NE(link.status().message().find("rank"), std::string::npos) << link.status();
  }
}

TEST(NcclLink, RefusesADeviceThatDoesNotExist) {
  absl::StatusOr<std::unique_ptr<NcclLink>> link =
      NcclLink::Start(std::string(128, '\0'), NcclLink::kServiceRank, 4096, 0);
  EXPECT_EQ(link.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(link.status().message().find("CUDA device 4096"), std::string::npos)
      << link.status();
}

}  // namespace
}  // namespace leapcache::transport
