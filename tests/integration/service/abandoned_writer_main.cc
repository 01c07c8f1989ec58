// A writer that dies mid-put, for abandoned_put_test: it reserves a compact put, uploads part of
// it, reports on stdout and then waits to be killed.
//
//   abandoned_writer TARGET NAMESPACE_ID HASH_HEX BLOCKS MODE
//
// MODE "uploaded": half the bytes are uploaded and that upload stream is finished.
// MODE "streaming": half the bytes are sent on an upload stream that stays open.
// Prints "reserved <put id> <expected bytes>" then "ready", then sleeps until killed.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "leapcache/client.h"
#include "leapcache/v1/state_cache.grpc.pb.h"

int main(int argc, char** argv) {
  using namespace leapcache;  // NOLINT
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s TARGET NAMESPACE_ID HASH_HEX BLOCKS MODE\n", argv[0]);
    return 2;
  }
  const std::string target = argv[1];
  const std::string mode = argv[5];
  client::ClientOptions options;
  options.target = target;
  auto c = client::Client::Create(options);
  auto hash = client::HashFromHex(argv[3]);
  if (!c.ok() || !hash.ok()) return 1;
  const int64_t blocks = std::atoll(argv[4]);
  client::PutTarget t{static_cast<uint32_t>(std::atoi(argv[2])),
                      *hash,
                      {blocks * 16, blocks},
                      {},
                      absl::ZeroDuration()};
  absl::StatusOr<client::Reservation> put = (*c)->ReservePut(t, std::nullopt);
  if (!put.ok()) {
    std::fprintf(stderr, "reserve: %s\n", put.status().ToString().c_str());
    return 1;
  }
  std::printf("reserved %llu %llu\n", static_cast<unsigned long long>(put->put_id),
              static_cast<unsigned long long>(put->expected_bytes));
  const std::vector<uint8_t> half(put->expected_bytes / 2, 0xAB);

  // Kept alive until the process dies: the open stream of "streaming".
  grpc::ClientContext context;
  v1::UploadPutResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadPutRequest>> writer;
  if (mode == "uploaded") {
    if (absl::Status st = (*c)->Upload(*put, 0, half); !st.ok()) {
      std::fprintf(stderr, "upload: %s\n", st.ToString().c_str());
      return 1;
    }
  } else {
    auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    auto stub = v1::StateCache::NewStub(channel);
    writer = stub->UploadPut(&context, &response);
    v1::UploadPutRequest chunk;
    chunk.set_put_id(put->put_id);
    chunk.set_offset(0);
    chunk.set_data(half.data(), half.size());
    if (!writer->Write(chunk)) return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  while (true) pause();
}
