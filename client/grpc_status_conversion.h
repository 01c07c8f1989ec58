// The client's one conversion from a call's grpc::Status to the absl::Status its methods return.
// Both enums follow google.rpc.Code, so the code and message pass through unchanged.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace leapcache::client {

absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace leapcache::client
