// Fuzz target: the peer-supplied UCX blobs of an Attach and of a buffer descriptor, on the
// service's real path. The first byte picks the blob: an engine's worker address (0) or a buffer's
// remote key (1), the rest of the input being the blob; or, where UCX is built, UCX's own address
// of a live worker (2) or key of a registered buffer (3) with edits, the rest of the input being
// (position: 2 bytes, value: 1 byte) triples, so that the walk meets transports UCX knows.
//
// Invariants: no crash, no sanitizer report (the server's abort in ucp_address_unpack was one);
// a blob the checks refuse is INVALID_ARGUMENT; where UCX is built, an address the checks accept
// goes to ucp_ep_create through UcxPeerConnection::Connect and a key to ucp_ep_rkey_unpack
// through Import on a live connection, and both answer a status (any) without crashing.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "transport/ucx/ucx_wire_check.h"

#ifdef LEAPCACHE_TRANSPORT_UCX
#include <sanitizer/lsan_interface.h>

#include "transport/ucx/ucx_context.h"
#include "transport/ucx/ucx_peer_connection.h"
#include "transport/ucx/ucx_target_worker.h"
#endif

namespace {

namespace transport = leapcache::transport;

#ifdef LEAPCACHE_TRANSPORT_UCX
// One engine and one service context for the whole run, over loopback tcp (as the integration
// tests run), and one live connection for the keys.
struct Peers {
  std::unique_ptr<transport::UcxContext> engine, service;
  std::unique_ptr<transport::UcxTargetWorker> target;
  std::unique_ptr<transport::UcxPeerConnection> connection;
  std::vector<uint8_t> buffer = std::vector<uint8_t>(1 << 16);
  std::unique_ptr<transport::Registration> registration;
};

Peers& GetPeers() {
  static Peers* peers = [] {
    // Kept for the whole run: UCX's endpoint of the live connection is held where LeakSanitizer
    // cannot see it, so its allocations are not leak candidates.
    __lsan::ScopedDisabler keep;
    auto* p = new Peers;
    auto engine = transport::UcxContext::Create({"tcp", false});
    auto service = transport::UcxContext::Create({"tcp", false});
    FUZZ_CHECK(engine.ok() && service.ok(), "UCX contexts: %s",
               (engine.ok() ? service.status() : engine.status()).ToString().c_str());
    p->engine = std::move(engine).value();
    p->service = std::move(service).value();
    auto target = transport::UcxTargetWorker::Create(p->engine.get());
    FUZZ_CHECK(target.ok(), "target worker: %s", target.status().ToString().c_str());
    p->target = std::move(target).value();
    auto c = transport::UcxPeerConnection::Connect(p->service.get(), p->target->address());
    FUZZ_CHECK(c.ok(), "connection: %s", c.status().ToString().c_str());
    p->connection = std::move(c).value();
    auto reg = p->engine->Register(p->buffer.data(), p->buffer.size(), transport::MemoryKind::kHost);
    FUZZ_CHECK(reg.ok(), "registration: %s", reg.status().ToString().c_str());
    p->registration = std::move(reg).value();
    return p;
  }();
  return *peers;
}
#endif

// `real` with the input's (position, value) edits.
std::string Edited(const std::string& real, const uint8_t* edits, size_t size) {
  std::string out = real;
  for (size_t i = 0; i + 3 <= size && !out.empty(); i += 3) {
    out[(edits[i] | (edits[i + 1] << 8)) % out.size()] = static_cast<char>(edits[i + 2]);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int kind = data[0] & 3;
  const bool key = kind & 1;
  std::string blob(reinterpret_cast<const char*>(data + 1), size - 1);
#ifdef LEAPCACHE_TRANSPORT_UCX
  if (kind == 2) blob = Edited(GetPeers().target->address(), data + 1, size - 1);
  if (kind == 3) blob = Edited(GetPeers().registration->descriptor().key, data + 1, size - 1);
#endif
  const absl::Status checked =
      key ? transport::CheckUcxRemoteKey(blob) : transport::CheckUcxWorkerAddress(blob);
  FUZZ_CHECK(checked.ok() || checked.code() == absl::StatusCode::kInvalidArgument,
             "a refused blob must be INVALID_ARGUMENT: %s", checked.ToString().c_str());
#ifdef LEAPCACHE_TRANSPORT_UCX
  Peers& peers = GetPeers();
  if (!key) {
    auto c = transport::UcxPeerConnection::Connect(peers.service.get(), blob);
    if (!checked.ok()) FUZZ_CHECK(!c.ok(), "Connect took an address the checks refused");
  } else {
    transport::BufferDescriptor d;
    d.transport = transport::TransportKind::kUcx;
    d.memory = transport::MemoryKind::kHost;
    d.address = reinterpret_cast<uint64_t>(peers.buffer.data());
    d.bytes = peers.buffer.size();
    d.key = blob;
    auto region = peers.connection->Import(d);
    if (!checked.ok()) FUZZ_CHECK(!region.ok(), "Import took a key the checks refused");
  }
#endif
  return 0;
}
