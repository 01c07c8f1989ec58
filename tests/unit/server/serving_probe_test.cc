// ServingProbe against a real gRPC server whose thread pool a few slow calls take: the probe
// reports not serving after its failures in a row, and serving again at the first answer.
#include "service/server/serving_probe.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "leapcache/v1/state_cache.grpc.pb.h"
#include "service/grpc/rpc_metrics.h"

namespace leapcache::server {
namespace {

// A StateCache whose Stats holds its thread until released when a client calls it over TCP, and
// answers at once over the in-process channel (the probe's).
class SlowStats final : public v1::StateCache::Service {
 public:
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest*,
                     v1::StatsResponse*) override {
    if (!IsInProcessPeer(context->peer())) release_.WaitForNotification();
    return grpc::Status::OK;
  }
  void Release() { release_.Notify(); }

 private:
  absl::Notification release_;
};

TEST(ServingProbeTest, AnExhaustedThreadPoolIsNotServingUntilAThreadIsFree) {
  SlowStats service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  grpc::ResourceQuota quota("serving-probe-test");
  quota.SetMaxThreads(4);
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  ServingProbe probe(server->InProcessChannel(grpc::ChannelArguments()), absl::Milliseconds(300),
                     /*failures=*/3);
  EXPECT_TRUE(probe.Probe());

  // Clients take every thread with calls that do not return.
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                     grpc::InsecureChannelCredentials());
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] {
      std::unique_ptr<v1::StateCache::Stub> stub = v1::StateCache::NewStub(channel);
      grpc::ClientContext context;
      v1::StatsRequest request;
      v1::StatsResponse response;
      (void)stub->Stats(&context, request, &response);
    });
  }
  absl::SleepFor(absl::Milliseconds(500));
  // No thread answers the probe: two failures in a row are not yet enough, the third is.
  EXPECT_TRUE(probe.Probe());
  EXPECT_TRUE(probe.Probe());
  EXPECT_FALSE(probe.Probe());
  EXPECT_FALSE(probe.Probe());

  service.Release();
  for (std::thread& t : clients) t.join();
  EXPECT_TRUE(probe.Probe());
  EXPECT_TRUE(probe.serving());
  server->Shutdown();
}

}  // namespace
}  // namespace leapcache::server
