// ServingProbe: whether the gRPC server can still serve a call, found out the way a client would.
//
// The standard health service answers from a thread of its own, so it said SERVING while every
// thread of the pool was taken and every client got RESOURCE_EXHAUSTED (the hardening finding on
// stream lockout). The probe sends a real call (StateCache/Stats, through the server's in-process
// channel, so it takes a pool thread like any other call) with a short deadline. An answer of any
// status means a thread served it (an unauthenticated probe's UNAUTHENTICATED included); no
// thread (RESOURCE_EXHAUSTED), a deadline passed in the queue (DEADLINE_EXCEEDED) or no server
// (UNAVAILABLE) is a failure. `failures` failures in a row make the server not serving; one
// answer makes it serving again. The server turns health and /readyz with it, so a load balancer
// sends new work elsewhere while the pool is exhausted.
//
// Not thread-safe: one caller (the server's housekeeping thread).
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>

#include <memory>

#include "absl/time/time.h"

namespace leapcache::server {

class ServingProbe {
 public:
  // `channel` reaches the server probed.
  ServingProbe(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline, int failures);

  // One probe call; returns whether the server is serving, as the last calls say.
  bool Probe();
  bool serving() const { return serving_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub stub_;
  const absl::Duration deadline_;
  const int failures_to_flip_;
  int failures_ = 0;
  bool serving_ = true;
};

}  // namespace leapcache::server
