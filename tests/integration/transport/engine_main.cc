// An engine process for the data-plane integration tests: it attaches to a leapcache-server over
// UCX and moves checkpoints through its own registered memory.
//
//   transport_engine TARGET roundtrip NAMESPACE_ID LAYERS HEADS D
//     With the client library's AttachedEngine: puts a compact checkpoint and a dense (fp32)
//     one from its registered buffer, gets both back (compact and dense, fp32 and bf16) into
//     another, and checks every byte against the reference codec. Prints "ok" and exits 0, or
//     the first mismatch and exits 1.
//     Its transfers go through the transfer channel (data_plane.proto, OpenTransferChannel).
//   transport_engine TARGET channel NAMESPACE_ID
//     With AttachedEngine: puts one compact checkpoint (1 layer, 2 heads, d = 16) through the
//     transfer channel, prints "ready" and waits to be killed with the channel open.
//   transport_engine TARGET hold BYTES
//     With the transport library and raw DataPlane calls: attaches, registers a BYTES-long host
//     buffer, prints "session <id> buffer <id>" and waits to be stopped or killed, progressing
//     its UCX worker. The test then drives transfers against it from its own process.
// Both use UCX over loopback tcp only: a stopped process then stalls every transfer (shared
// memory would let the service finish without it).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "leapcache/data_plane.h"
#include "leapcache/v1/data_plane.grpc.pb.h"
#include "transport/ucx/ucx_context.h"
#include "transport/ucx/ucx_target_worker.h"
#include "tests/integration/service/checkpoint_data.h"

namespace leapcache::testing {
namespace {

using client::DenseEncoding;
using client::DType;
using client::Layout;

int Fail(const std::string& what, const absl::Status& st = absl::OkStatus()) {
  std::printf("FAIL %s %s\n", what.c_str(), st.ToString().c_str());
  std::fflush(stdout);
  return 1;
}

client::PutTarget Target(uint32_t ns, const client::BlockHash& key, int64_t blocks) {
  return {ns, key, {blocks * 16, blocks}, {}, absl::ZeroDuration()};
}

int RoundTrip(const std::string& target, uint32_t ns, int layers, int heads, int d) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-transport", layers, heads, d);
  client::ClientOptions options;
  options.target = target;
  client::EngineIdentity identity;
  identity.name = "test-engine";
  client::AttachOptions attach;
  attach.transports = {client::Transport::kUcx};
  attach.ucx_transports = "tcp";
  auto engine = client::AttachedEngine::Attach(options, identity, attach);
  if (!engine.ok()) return Fail("attach", engine.status());
  if ((*engine)->transport() != client::Transport::kUcx) return Fail("transport is not ucx");

  const std::vector<float> states = MakeStates(spec, 42);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, states);
  const std::span<const uint8_t> dense_bytes = AsBytes(states);
  // One source buffer holding both puts, at an offset each; one destination buffer.
  std::vector<uint8_t> source(blobs.size() + dense_bytes.size() + 4096);
  std::copy(blobs.begin(), blobs.end(), source.begin() + 100);
  std::copy(dense_bytes.begin(), dense_bytes.end(), source.begin() + 100 + blobs.size());
  std::vector<uint8_t> dest(source.size(), 0);
  auto src = (*engine)->RegisterBuffer(source.data(), source.size(), client::MemoryKind::kHost);
  auto dst = (*engine)->RegisterBuffer(dest.data(), dest.size(), client::MemoryKind::kHost);
  if (!src.ok() || !dst.ok()) return Fail("register", src.ok() ? dst.status() : src.status());

  const client::BlockHash compact_key = TestHash(1, 7), dense_key = TestHash(2, 7);
  if (absl::Status st = (*engine)->PutFrom(Target(ns, compact_key, 1), std::nullopt, *src, 100,
                                           blobs.size());
      !st.ok()) {
    return Fail("compact put", st);
  }
  if (!(*engine)->transferring_through_channel()) return Fail("the put took the RPC");
  if (absl::Status st =
          (*engine)->PutFrom(Target(ns, dense_key, 2), DenseEncoding{DType::kFp32, Layout::kKV},
                             *src, 100 + blobs.size(), dense_bytes.size());
      !st.ok()) {
    return Fail("dense put", st);
  }

  // Compact get of each: the stored blobs, byte-exact (the dense put was encoded by the
  // service with the same reference codec).
  for (const client::BlockHash& key : {compact_key, dense_key}) {
    auto got = (*engine)->GetInto({ns, key, {}, std::nullopt}, *dst, 8);
    if (!got.ok()) return Fail("compact get", got.status());
    if (got->total_bytes != blobs.size() ||
        !std::equal(blobs.begin(), blobs.end(), dest.begin() + 8)) {
      return Fail("compact get bytes differ");
    }
  }
  // Dense gets: fp32 in VK layout, bf16 in KV layout.
  const std::vector<float> expected_vk = DecodeBlobs(spec, blobs, Layout::kVK);
  auto fp32 = (*engine)->GetInto({ns, dense_key, {}, DenseEncoding{DType::kFp32, Layout::kVK}},
                                 *dst, 0);
  if (!fp32.ok()) return Fail("dense fp32 get", fp32.status());
  const std::span<const uint8_t> want = AsBytes(expected_vk);
  if (fp32->total_bytes != want.size() || !fp32->dense.has_value() ||
      !std::equal(want.begin(), want.end(), dest.begin())) {
    return Fail("dense fp32 get bytes differ");
  }
  const std::vector<uint8_t> want_bf16 = ToBf16Bytes(DecodeBlobs(spec, blobs, Layout::kKV));
  auto bf16 = (*engine)->GetInto({ns, dense_key, {}, DenseEncoding{DType::kBf16, Layout::kKV}},
                                 *dst, 0);
  if (!bf16.ok()) return Fail("dense bf16 get", bf16.status());
  if (bf16->total_bytes != want_bf16.size() ||
      !std::equal(want_bf16.begin(), want_bf16.end(), dest.begin())) {
    return Fail("dense bf16 get bytes differ");
  }
  // A head range: heads [1, 3) only.
  const std::vector<uint8_t> part = EncodeBlobs(spec, SliceHeads(spec, states, 1, 3));
  auto sliced = (*engine)->GetInto({ns, compact_key, {1, 3}, std::nullopt}, *dst, 0);
  if (!sliced.ok()) return Fail("head-range get", sliced.status());
  if (sliced->total_bytes != part.size() || !std::equal(part.begin(), part.end(), dest.begin())) {
    return Fail("head-range get bytes differ");
  }
  if (!(*engine)->transferring_through_channel()) return Fail("the get took the RPC");
  if (absl::Status st = (*engine)->Detach(); !st.ok()) return Fail("detach", st);
  std::printf("ok\n");
  return 0;
}

int Channel(const std::string& target, uint32_t ns) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-killed", 1, 2, 16);
  client::ClientOptions options;
  options.target = target;
  client::EngineIdentity identity;
  identity.name = "channel-engine";
  client::AttachOptions attach;
  attach.transports = {client::Transport::kUcx};
  attach.ucx_transports = "tcp";
  attach.transfer_channel = client::TransferChannel::kSharedMemory;
  auto engine = client::AttachedEngine::Attach(options, identity, attach);
  if (!engine.ok()) return Fail("attach", engine.status());
  std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 5));
  auto id = (*engine)->RegisterBuffer(blobs.data(), blobs.size(), client::MemoryKind::kHost);
  if (!id.ok()) return Fail("register", id.status());
  if (absl::Status st =
          (*engine)->PutFrom(Target(ns, TestHash(1), 1), std::nullopt, *id, 0, blobs.size());
      !st.ok()) {
    return Fail("put", st);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  while (true) pause();
}

int Hold(const std::string& target, size_t bytes) {
  auto ctx = transport::UcxContext::Create({"tcp", false});
  if (!ctx.ok()) return Fail("ucx context", ctx.status());
  auto worker = transport::UcxTargetWorker::Create(ctx->get());
  if (!worker.ok()) return Fail("ucx worker", worker.status());
  std::vector<uint8_t> buffer(bytes, 0xAB);
  auto reg = (*ctx)->Register(buffer.data(), buffer.size(), transport::MemoryKind::kHost);
  if (!reg.ok()) return Fail("register", reg.status());

  auto stub =
      v1::DataPlane::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  v1::AttachRequest attach;
  attach.mutable_identity()->set_name("held-engine");
  attach.mutable_identity()->set_pid(static_cast<uint32_t>(getpid()));
  v1::TransportOffer* offer = attach.add_offers();
  offer->set_kind(v1::TRANSPORT_KIND_UCX);
  offer->set_connection_info((*worker)->address());
  v1::AttachResponse attached;
  grpc::ClientContext c1;
  if (grpc::Status st = stub->Attach(&c1, attach, &attached); !st.ok()) {
    return Fail("attach " + st.error_message());
  }
  v1::RegisterBufferRequest reg_req;
  reg_req.set_session_id(attached.session_id());
  const transport::BufferDescriptor& d = (*reg)->descriptor();
  reg_req.mutable_buffer()->set_transport(v1::TRANSPORT_KIND_UCX);
  reg_req.mutable_buffer()->set_memory(v1::MEMORY_KIND_HOST);
  reg_req.mutable_buffer()->set_address(d.address);
  reg_req.mutable_buffer()->set_bytes(d.bytes);
  reg_req.mutable_buffer()->set_remote_key(d.key);
  v1::RegisterBufferResponse registered;
  grpc::ClientContext c2;
  if (grpc::Status st = stub->RegisterBuffer(&c2, reg_req, &registered); !st.ok()) {
    return Fail("register buffer " + st.error_message());
  }
  std::printf("session %llu buffer %llu\n",
              static_cast<unsigned long long>(attached.session_id()),
              static_cast<unsigned long long>(registered.buffer_id()));
  std::fflush(stdout);
  while (true) pause();
}

}  // namespace
}  // namespace leapcache::testing

int main(int argc, char** argv) {
  using namespace leapcache::testing;  // NOLINT
  if (argc >= 7 && std::string(argv[2]) == "roundtrip") {
    return RoundTrip(argv[1], static_cast<uint32_t>(std::atoi(argv[3])), std::atoi(argv[4]),
                     std::atoi(argv[5]), std::atoi(argv[6]));
  }
  if (argc == 4 && std::string(argv[2]) == "channel") {
    return Channel(argv[1], static_cast<uint32_t>(std::atoi(argv[3])));
  }
  if (argc == 4 && std::string(argv[2]) == "hold") {
    return Hold(argv[1], static_cast<size_t>(std::atoll(argv[3])));
  }
  std::fprintf(
      stderr,
      "usage: %s TARGET roundtrip NS LAYERS HEADS D | TARGET channel NS | TARGET hold BYTES\n",
      argv[0]);
  return 2;
}
