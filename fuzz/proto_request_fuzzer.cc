// Fuzz target: the server's wire side on arbitrary serialized requests: the proto -> core
// conversions of service/grpc/proto_convert.h, and the StateCache handlers behind them on a
// real cache core (CPU backend, a small fresh store per input).
//
// An input is a sequence of records [kind: 1 byte][length: 2 bytes, little-endian][message],
// each message parsed as the request type `kind` selects (bytes that do not parse are skipped),
// so one input can register a namespace, reserve, upload, commit and read a put (namespace id k
// in a request names the k-th namespace the input registered, see Remap).
//
// Invariants: no crash, no sanitizer report; every conversion error is INVALID_ARGUMENT naming
// the field it rejects; every handler answers OK or one of the status codes state_cache.proto
// documents, never INTERNAL or UNKNOWN, and never without a message; each result of a
// LookupBatch is exactly what Lookup answers for it alone (code, message, answer); a committed checkpoint
// reads back whole in compact form (decoding may only fail with DATA_LOSS naming the blob);
// once every put this input reserved is aborted, nothing stays pending, reserved or leased.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "fuzz/fuzz_check.h"
#include "leapcache/v1/state_cache.pb.h"
#include "service/core/checkpoint_store.h"
#include "service/core/clock.h"
#include "service/core/host_tier.h"
#include "service/facade/checkpoint_reader.h"
#include "service/grpc/proto_convert.h"
#include "service/facade/put_pipeline.h"
#include "service/grpc/authorizer.h"
#include "service/grpc/state_cache_service.h"
#include "service/grpc/stream_watchdog.h"
#include "service/metrics/registry.h"

namespace {

namespace compute = leapcache::compute;
namespace core = leapcache::core;
namespace server = leapcache::server;
namespace v1 = leapcache::v1;

constexpr size_t kBudgetBytes = 2 << 20;
constexpr size_t kPageBytes = 64 << 10;

void CheckStatus(const grpc::Status& st, const char* rpc) {
  if (st.ok()) return;
  switch (st.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::DATA_LOSS:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      break;
    default:
      FUZZ_CHECK(false, "%s answered undocumented code %d: %s", rpc,
                 static_cast<int>(st.error_code()), st.error_message().c_str());
  }
  FUZZ_CHECK(!st.error_message().empty(), "%s failed without a message", rpc);
}

// A conversion error must be INVALID_ARGUMENT and name `field`.
void CheckNamesField(const absl::Status& st, const char* field) {
  if (st.ok()) return;
  FUZZ_CHECK(st.code() == absl::StatusCode::kInvalidArgument, "conversion gave code %d: %s",
             static_cast<int>(st.code()), std::string(st.message()).c_str());
  FUZZ_CHECK(absl::StrContains(st.message(), field), "error does not name %s: %s", field,
             std::string(st.message()).c_str());
}

// The conversions alone, on whatever parsed.
void CheckConversions(const v1::RegisterNamespaceRequest& r) {
  absl::Status st = server::NamespaceSpecFromProto(r).status();
  if (!st.ok()) {
    FUZZ_CHECK(absl::StrContains(st.message(), "model.kind") ||
                   absl::StrContains(st.message(), "format.codec"),
               "namespace error names no field: %s", std::string(st.message()).c_str());
  }
}
void CheckConversions(const v1::LookupRequest& r) {
  CheckNamesField(server::ChainFromProto(r.chain()).status(), "chain");
  CheckNamesField(server::HeadsFromProto(r.has_heads(), r.heads(), 8).status(), "heads");
}
void CheckConversions(const v1::ReservePutRequest& r) {
  CheckNamesField(server::HashFromProto(r.hash(), "hash").status(), "hash");
  CheckNamesField(server::PositionFromProto(r.position()).status(), "position");
  CheckNamesField(server::HeadsFromProto(r.has_heads(), r.heads(), 8).status(), "heads");
  if (r.has_dense()) CheckNamesField(server::DenseFromProto(r.dense()).status(), "dense.");
}
void CheckConversions(const v1::GetRequest& r) {
  CheckNamesField(server::HashFromProto(r.hash(), "hash").status(), "hash");
  if (r.has_dense()) CheckNamesField(server::DenseFromProto(r.dense()).status(), "dense.");
}

// One input's server: a fresh store, pipeline and service.
struct Harness {
  std::unique_ptr<core::CheckpointStore> store;
  std::unique_ptr<server::PutPipeline> puts;
  std::unique_ptr<server::Authorizer> auth;  // open: no tokens file
  std::unique_ptr<leapcache::metrics::Registry> registry;
  std::unique_ptr<server::StreamWatchdog> watchdog;  // never swept: no stream runs here
  std::unique_ptr<server::StateCacheService> service;
  std::vector<uint64_t> reserved;  // put ids this input reserved
  std::vector<uint32_t> namespaces;  // ids this input registered, in order
};

// Namespace ids derive from each namespace's identity hash, so an input cannot know them: a
// request's namespace_id k in [1, registered] names the k-th namespace this input registered
// (any other id is sent as it is).
template <typename Request>
void Remap(const Harness& h, Request& r) {
  const uint32_t k = r.namespace_id();
  if (k >= 1 && k <= h.namespaces.size()) r.set_namespace_id(h.namespaces[k - 1]);
}

Harness MakeHarness() {
  Harness h;
  std::vector<std::unique_ptr<core::MemoryTier>> tiers;
  absl::StatusOr<std::unique_ptr<core::HostTier>> tier =
      core::HostTier::Create("host", kBudgetBytes, kPageBytes);
  FUZZ_CHECK(tier.ok(), "cannot make the tier");
  tiers.push_back(*std::move(tier));
  absl::StatusOr<std::unique_ptr<core::CheckpointStore>> store =
      core::CheckpointStore::Create(core::StoreOptions{}, std::move(tiers));
  FUZZ_CHECK(store.ok(), "cannot make the store");
  h.store = *std::move(store);
  h.puts = std::make_unique<server::PutPipeline>(h.store.get(), core::MonotonicClock());
  h.auth = std::make_unique<server::Authorizer>(std::nullopt, h.store.get(),
                                                core::MonotonicClock());
  h.registry = std::make_unique<leapcache::metrics::Registry>();
  h.watchdog = std::make_unique<server::StreamWatchdog>(server::StreamLimits{},
                                                        core::MonotonicClock(), h.registry.get());
  h.service = std::make_unique<server::StateCacheService>(
      h.store.get(), h.puts.get(), h.auth.get(), h.watchdog.get(), server::ServiceLimits{64 << 10});
  return h;
}

// What StateCacheService::Get does, without a gRPC stream: open a reader and read it all.
void ReadWhole(Harness& h, const v1::GetRequest& r) {
  server::ReadRequest q;
  q.ns = r.namespace_id();
  absl::StatusOr<core::BlockHash> hash = server::HashFromProto(r.hash(), "hash");
  if (!hash.ok()) return;
  q.hash = *hash;
  absl::StatusOr<core::NamespaceInfo> info = h.store->GetNamespace(q.ns);
  if (!info.ok()) return;
  absl::StatusOr<core::HeadRange> heads =
      server::HeadsFromProto(r.has_heads(), r.heads(), info->spec.model.total_heads);
  if (!heads.ok()) return;
  q.heads = *heads;
  if (r.has_dense()) {
    absl::StatusOr<compute::DenseFormat> dense = server::DenseFromProto(r.dense());
    if (!dense.ok()) return;
    q.dense = *dense;
  }
  absl::StatusOr<std::unique_ptr<server::CheckpointReader>> reader =
      server::CheckpointReader::Open(*h.store, q);
  if (!reader.ok()) {
    CheckStatus(grpc::Status(static_cast<grpc::StatusCode>(reader.status().code()),
                             std::string(reader.status().message())),
                "Get");
    return;
  }
  std::vector<uint8_t> buffer(4096);
  uint64_t total = 0;
  while (!(*reader)->done()) {
    absl::StatusOr<size_t> n = (*reader)->Read(buffer);
    if (!n.ok()) {
      // Compact reads copy bytes the commit checked. Decoding may find a blob whose CRCs hold
      // but whose values do not (a client may commit any sealed bytes): DATA_LOSS naming it.
      FUZZ_CHECK(q.dense.has_value() && n.status().code() == absl::StatusCode::kDataLoss &&
                     absl::StrContains(n.status().message(), "layer"),
                 "a committed checkpoint failed to read: %s",
                 std::string(n.status().message()).c_str());
      return;
    }
    FUZZ_CHECK(*n > 0, "a reader that is not done returned no bytes");
    total += *n;
  }
  FUZZ_CHECK(total == (*reader)->shape().total_bytes, "read %llu of %llu bytes",
             static_cast<unsigned long long>(total),
             static_cast<unsigned long long>((*reader)->shape().total_bytes));
}

template <typename Message>
bool Parse(const uint8_t* data, size_t size, Message* m) {
  return m->ParseFromArray(data, static_cast<int>(size));
}

void RunRecord(Harness& h, uint8_t kind, const uint8_t* data, size_t size) {
  server::StateCacheService& s = *h.service;
  // The handlers ask the authorizer about the call first; an open one reads nothing of it.
  grpc::ServerContext context;
  grpc::ServerContext* const ctx = &context;
  switch (kind % 11) {
    case 0: {
      v1::RegisterNamespaceRequest r;
      v1::RegisterNamespaceResponse out;
      if (!Parse(data, size, &r)) return;
      CheckConversions(r);
      grpc::Status st = s.RegisterNamespace(ctx, &r, &out);
      CheckStatus(st, "RegisterNamespace");
      if (st.ok()) {
        FUZZ_CHECK(out.namespace_id() != 0 && out.namespace_tag() != 0, "an id or a tag of 0");
        h.namespaces.push_back(out.namespace_id());
      }
      return;
    }
    case 1: {
      v1::LookupRequest r;
      v1::LookupResponse out;
      if (!Parse(data, size, &r)) return;
      Remap(h, r);
      CheckConversions(r);
      CheckStatus(s.AnswerLookup(*ctx, r, &out), "Lookup");
      return;
    }
    case 10: {
      v1::LookupBatchRequest r;
      v1::LookupBatchResponse out;
      if (!Parse(data, size, &r)) return;
      for (v1::LookupRequest& lookup : *r.mutable_lookups()) Remap(h, lookup);
      const grpc::Status st = s.AnswerLookupBatch(*ctx, r, &out);
      CheckStatus(st, "LookupBatch");
      if (!st.ok()) return;
      // Each result is what Lookup answers alone.
      FUZZ_CHECK(out.results_size() == r.lookups_size(), "%d results for %d lookups",
                 out.results_size(), r.lookups_size());
      for (int i = 0; i < r.lookups_size(); ++i) {
        v1::LookupResponse alone;
        const grpc::Status one = s.AnswerLookup(*ctx, r.lookups(i), &alone);
        const v1::LookupBatchResult& got = out.results(i);
        FUZZ_CHECK(got.code() == static_cast<int>(one.error_code()) &&
                       got.message() == one.error_message() &&
                       got.lookup().SerializeAsString() ==
                           (one.ok() ? alone.SerializeAsString() : std::string()),
                   "batch result %d differs from its lookup alone", i);
      }
      return;
    }
    case 2: {
      v1::ReservePutRequest r;
      v1::ReservePutResponse out;
      if (!Parse(data, size, &r)) return;
      Remap(h, r);
      CheckConversions(r);
      // A short TTL: puts this input leaves open must not outlive it by much.
      if (r.ttl_ms() > 60000) r.set_ttl_ms(60000);
      grpc::Status st = s.ReservePut(ctx, &r, &out);
      CheckStatus(st, "ReservePut");
      if (st.ok()) h.reserved.push_back(out.put_id());
      return;
    }
    case 3: {
      // StateCacheService::UploadPut's body for one chunk (the handler needs a stream).
      v1::UploadPutRequest r;
      if (!Parse(data, size, &r)) return;
      const std::string& bytes = r.data();
      absl::Status st = h.puts->Upload(
          r.put_id(), r.offset(),
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      CheckStatus(grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message())),
                  "UploadPut");
      return;
    }
    case 4: {
      v1::CommitPutRequest r;
      v1::CommitPutResponse out;
      if (!Parse(data, size, &r)) return;
      CheckStatus(s.CommitPut(ctx, &r, &out), "CommitPut");
      return;
    }
    case 5: {
      v1::AbortPutRequest r;
      v1::AbortPutResponse out;
      if (!Parse(data, size, &r)) return;
      CheckStatus(s.AbortPut(ctx, &r, &out), "AbortPut");
      return;
    }
    case 6: {
      v1::GetRequest r;
      if (!Parse(data, size, &r)) return;
      Remap(h, r);
      CheckConversions(r);
      ReadWhole(h, r);
      return;
    }
    case 7: {
      v1::DeleteRequest r;
      v1::DeleteResponse out;
      if (!Parse(data, size, &r)) return;
      Remap(h, r);
      CheckStatus(s.Delete(ctx, &r, &out), "Delete");
      return;
    }
    case 8: {
      v1::PinRequest r;
      v1::PinResponse out;
      if (!Parse(data, size, &r)) return;
      Remap(h, r);
      CheckStatus(s.Pin(ctx, &r, &out), "Pin");
      v1::UnpinRequest u;
      v1::UnpinResponse uout;
      u.set_namespace_id(r.namespace_id());
      u.set_namespace_tag(r.namespace_tag());
      u.set_hash(r.hash());
      CheckStatus(s.Unpin(ctx, &u, &uout), "Unpin");
      return;
    }
    default: {
      v1::StatsRequest r;
      v1::StatsResponse out;
      CheckStatus(s.Stats(ctx, &r, &out), "Stats");
      return;
    }
  }
}

}  // namespace

// Parsing rejects invalid UTF-8 in string fields with a log line per message; at thousands of
// inputs a second that drowns the fuzzer's own output, and the rejection itself is the point.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness h = MakeHarness();
  size_t at = 0;
  while (at + 3 <= size) {
    const uint8_t kind = data[at];
    const size_t length = std::min<size_t>(data[at + 1] | (data[at + 2] << 8), size - at - 3);
    RunRecord(h, kind, data + at + 3, length);
    at += 3 + length;
  }
  // Every put left open is aborted (or already gone); then nothing may stay pending or reserved.
  for (uint64_t id : h.reserved) {
    absl::Status st = h.puts->Abort(id);
    FUZZ_CHECK(st.ok() || st.code() == absl::StatusCode::kNotFound ||
                   st.code() == absl::StatusCode::kDeadlineExceeded,
               "abort of put %llu: %s", static_cast<unsigned long long>(id),
               std::string(st.message()).c_str());
  }
  const core::StoreStats stats = h.store->Stats();
  FUZZ_CHECK(stats.pending_puts == 0, "%llu puts still pending",
             static_cast<unsigned long long>(stats.pending_puts));
  FUZZ_CHECK(h.puts->dense_puts() == 0, "dense put bookkeeping left behind");
  FUZZ_CHECK(stats.leases == 0, "%llu read leases still held",
             static_cast<unsigned long long>(stats.leases));
  for (const core::TierStats& t : stats.tiers) {
    FUZZ_CHECK(t.reserved_bytes == 0, "tier %s keeps %llu reserved bytes", t.name.c_str(),
               static_cast<unsigned long long>(t.reserved_bytes));
  }
  return 0;
}
