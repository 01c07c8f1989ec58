// The one conversion from the core's absl::Status to the grpc::Status a handler returns.
//
// absl::StatusCode and grpc::StatusCode share their numbering (both follow google.rpc.Code), so
// the code passes through unchanged and the message is kept: a client sees exactly the code the
// core documents (e.g. NOT_FOUND for an unknown namespace) with its explanation.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace leapcache::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace leapcache::server
