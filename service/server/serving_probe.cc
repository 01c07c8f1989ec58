#include "service/server/serving_probe.h"

#include <grpcpp/client_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

namespace leapcache::server {

ServingProbe::ServingProbe(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline,
                           int failures)
    : channel_(std::move(channel)),
      stub_(channel_),
      deadline_(deadline),
      failures_to_flip_(failures) {}

bool ServingProbe::Probe() {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::microseconds(absl::ToInt64Microseconds(deadline_)));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);  // an empty StatsRequest
  grpc::ByteBuffer response;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub_.UnaryCall(&context, "/leapcache.v1.StateCache/Stats", grpc::StubOptions(), &request,
                  &response, [&](grpc::Status s) {
                    std::lock_guard<std::mutex> lock(mu);
                    status = std::move(s);
                    done = true;
                    cv.notify_one();
                  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  const grpc::StatusCode code = status.error_code();
  const bool served = code != grpc::StatusCode::RESOURCE_EXHAUSTED &&
                      code != grpc::StatusCode::DEADLINE_EXCEEDED &&
                      code != grpc::StatusCode::UNAVAILABLE;
  if (served) {
    failures_ = 0;
    serving_ = true;
  } else if (++failures_ >= failures_to_flip_) {
    serving_ = false;
  }
  return serving_;
}

}  // namespace leapcache::server
