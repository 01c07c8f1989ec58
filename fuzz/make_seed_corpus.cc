// leapcache-fuzz-seeds: writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/),
// made by the project's own writers so every seed is a valid input that reaches deep into the
// code under test; the fuzzers mutate from there.
//
//   leapcache-fuzz-seeds OUT_DIR      (the committed corpus: OUT_DIR = fuzz/corpus)
//
// Deterministic: the same build writes the same files.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gpu/format/crc32c.h"
#include "gpu/format/format.h"
#include "gpu/tools/npy.h"
#include "leapcache/v1/data_plane.pb.h"
#include "leapcache/v1/decode.pb.h"
#include "leapcache/v1/state_cache.pb.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = leapcache::v1;
using leapcache::BlobSpec;
using leapcache::Codec;
using leapcache::StateKind;

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// A sealed blob of `spec` with a pseudo-random payload.
std::string SealedBlob(const BlobSpec& spec, uint32_t seed) {
  std::vector<uint8_t> blob(leapcache::ComputeLayout(spec).blob_bytes());
  std::mt19937 rng(seed);
  for (size_t i = 64; i < blob.size(); ++i) blob[i] = static_cast<uint8_t>(rng());
  leapcache::SealBlob(spec, blob);
  return std::string(blob.begin(), blob.end());
}

std::vector<BlobSpec> SeedSpecs() {
  std::vector<BlobSpec> specs;
  for (int bits : {8, 6, 4}) specs.push_back(BlobSpec::Leap(StateKind::kGdn, bits, 16, 16));
  specs.push_back(BlobSpec::Leap(StateKind::kKda, 8, 32, 16));
  for (auto [codec, bits] : {std::pair{Codec::kFp32, 32}, {Codec::kBf16, 16}, {Codec::kFp16, 16},
                             {Codec::kIntRow, 8}, {Codec::kIntCol, 8}}) {
    BlobSpec s;
    s.codec = codec;
    s.bits = bits;
    s.dk = 16;
    s.dv = 16;
    s.p = 1;
    s.r = 0;
    s.smoothing = false;
    specs.push_back(s);
  }
  return specs;
}

void BlobCorpus(const fs::path& dir) {
  int n = 0;
  for (const BlobSpec& s : SeedSpecs()) {
    if (!leapcache::ValidateSpec(s).ok()) {
      std::fprintf(stderr, "seed spec %s is invalid\n", s.ToString().c_str());
      std::exit(1);
    }
    WriteFile(dir / ("blob-" + std::to_string(n++)), SealedBlob(s, n));
  }
}

void NpyCorpus(const fs::path& dir) {
  const fs::path tmp = dir / "tmp.npy";
  const std::vector<std::vector<int64_t>> shapes = {{}, {3}, {2, 3}, {1, 2, 4, 4}, {0, 5}};
  int n = 0;
  for (const std::vector<int64_t>& shape : shapes) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::vector<float> data(static_cast<size_t>(count));
    for (size_t i = 0; i < data.size(); ++i) data[i] = 0.5f * static_cast<float>(i) - 1.0f;
    if (!leapcache::tools::WriteNpy(tmp.string(), shape, data).ok()) std::exit(1);
    fs::rename(tmp, dir / ("npy-" + std::to_string(n++)));
  }
}

void ConfigCorpus(const fs::path& dir) {
  const std::vector<std::string> files = {
      "listen: \"0.0.0.0:7470\"\nmetrics_listen: \"0.0.0.0:9470\"\n",
      "memory_budget: 512MiB\nspill_budget: 25%\npage_bytes: 64KiB\neviction_policy: lru\n"
      "eviction_half_life: 1024.5\npromote_on_hit: false\n",
      "put_ttl: 20s\nmax_put_ttl: 5m\nreaper_interval: 500ms\nmax_pending_puts: 100\n",
      "max_message_bytes: 4MiB\nchunk_bytes: 512KiB\nmax_concurrent_streams: 64\n"
      "max_threads: 16\nkeepalive_time: 1m\nkeepalive_timeout: 20s\n"
      "min_client_ping_interval: 10s\nmax_connection_idle: 30m\nhandshake_timeout: 5s\n"
      "max_metadata_bytes: 16KiB\nshutdown_grace: 10s\n",
      "tls_cert_file: \"\"\ntls_key_file: \"\"\ntls_client_ca_file: \"\"\ntokens_file: \"\"\n",
      "# empty settings\n",
  };
  int n = 0;
  for (const std::string& f : files) WriteFile(dir / ("config-" + std::to_string(n++)), f);
}

// One record of the proto request fuzzer: [kind][length u16 LE][message].
void Record(std::string* out, uint8_t kind, const google::protobuf::Message& m) {
  const std::string bytes = m.SerializeAsString();
  out->push_back(static_cast<char>(kind));
  out->push_back(static_cast<char>(bytes.size() & 0xff));
  out->push_back(static_cast<char>(bytes.size() >> 8));
  out->append(bytes);
}

void ProtoCorpus(const fs::path& dir) {
  // The first namespace a fresh store registers gets id 1 and its first put id 1.
  v1::RegisterNamespaceRequest reg;
  reg.set_tenant("tenant-seed");
  reg.mutable_model()->set_linear_layers(1);
  reg.mutable_model()->set_total_heads(2);
  reg.mutable_model()->set_dk(16);
  reg.mutable_model()->set_dv(16);
  reg.mutable_model()->set_kind(v1::STATE_KIND_GDN);
  reg.mutable_format()->set_codec(v1::CODEC_LEAP);
  reg.mutable_format()->set_bits(8);
  reg.mutable_format()->set_p(16);
  reg.mutable_format()->set_r(4);
  reg.mutable_format()->set_smoothing(true);
  const std::string hash(32, '\x11');

  // Compact put: register, reserve, upload two sealed blobs, commit, lookup (alone and in a batch),
  // get, delete.
  std::string blobs = SealedBlob(BlobSpec::Leap(StateKind::kGdn, 8, 16, 16), 1) +
                      SealedBlob(BlobSpec::Leap(StateKind::kGdn, 8, 16, 16), 2);
  std::string compact;
  Record(&compact, 0, reg);
  v1::ReservePutRequest reserve;
  reserve.set_namespace_id(1);
  reserve.set_hash(hash);
  reserve.mutable_position()->set_tokens(16);
  reserve.mutable_position()->set_blocks(1);
  Record(&compact, 2, reserve);
  v1::UploadPutRequest upload;
  upload.set_put_id(1);
  upload.set_offset(0);
  upload.set_data(blobs);
  Record(&compact, 3, upload);
  v1::CommitPutRequest commit;
  commit.set_put_id(1);
  commit.set_crc32c(leapcache::Crc32c(blobs.data(), blobs.size()));
  Record(&compact, 4, commit);
  v1::LookupRequest lookup;
  lookup.set_namespace_id(1);
  lookup.set_chain(std::string(32, '\x22') + hash);
  lookup.set_block_tokens(16);
  Record(&compact, 1, lookup);
  // A batch: the hit, a miss, and one of an unknown namespace (its own NOT_FOUND).
  v1::LookupBatchRequest batch;
  *batch.add_lookups() = lookup;
  batch.add_lookups()->set_chain(std::string(32, '\x44'));
  batch.mutable_lookups(1)->set_namespace_id(1);
  *batch.add_lookups() = lookup;
  batch.mutable_lookups(2)->set_namespace_id(7);
  Record(&compact, 10, batch);
  v1::GetRequest get;
  get.set_namespace_id(1);
  get.set_hash(hash);
  Record(&compact, 6, get);
  get.mutable_dense()->set_dtype(v1::DTYPE_BF16);
  get.mutable_dense()->set_layout(v1::LAYOUT_VK);
  Record(&compact, 6, get);
  v1::PinRequest pin;
  pin.set_namespace_id(1);
  pin.set_hash(hash);
  Record(&compact, 8, pin);
  Record(&compact, 9, v1::StatsRequest());
  v1::DeleteRequest del;
  del.set_namespace_id(1);
  del.set_hash(hash);
  Record(&compact, 7, del);
  WriteFile(dir / "proto-compact-put", compact);

  // Dense fp32 put of one head range, then an abort of a second put.
  std::string dense;
  Record(&dense, 0, reg);
  reserve.mutable_dense()->set_dtype(v1::DTYPE_FP32);
  reserve.mutable_dense()->set_layout(v1::LAYOUT_KV);
  reserve.mutable_heads()->set_begin(0);
  reserve.mutable_heads()->set_end(1);
  Record(&dense, 2, reserve);
  std::vector<float> state(16 * 16);
  for (size_t i = 0; i < state.size(); ++i) state[i] = 0.01f * static_cast<float>(i % 37) - 0.1f;
  upload.set_data(std::string(reinterpret_cast<const char*>(state.data()),
                              state.size() * sizeof(float)));
  Record(&dense, 3, upload);
  commit.set_crc32c(leapcache::Crc32c(upload.data().data(), upload.data().size()));
  Record(&dense, 4, commit);
  reserve.set_hash(std::string(32, '\x33'));
  Record(&dense, 2, reserve);
  v1::AbortPutRequest abort;
  abort.set_put_id(2);
  Record(&dense, 5, abort);
  WriteFile(dir / "proto-dense-put", dense);
}

// engine_request (engine_request_fuzzer.cc's record kinds): a namespace and a committed
// checkpoint, then the data plane (attach over UCX to the fuzzer's own engine, its buffer, a get
// into it, a put from it) and attached decode (a session, a load, steps in the messages and over
// the buffer, a commit). The fuzzer's UCX engine stands in for an empty connection_info and key.
void EngineCorpus(const fs::path& dir) {
  v1::RegisterNamespaceRequest reg;
  reg.set_tenant("tenant-seed");
  reg.mutable_model()->set_linear_layers(1);
  reg.mutable_model()->set_total_heads(2);
  reg.mutable_model()->set_dk(16);
  reg.mutable_model()->set_dv(16);
  reg.mutable_model()->set_kind(v1::STATE_KIND_GDN);
  reg.mutable_format()->set_codec(v1::CODEC_LEAP);
  reg.mutable_format()->set_bits(8);
  reg.mutable_format()->set_p(16);
  reg.mutable_format()->set_r(4);
  reg.mutable_format()->set_smoothing(true);
  const std::string hash(32, '\x11');
  const std::string blobs = SealedBlob(BlobSpec::Leap(StateKind::kGdn, 8, 16, 16), 1) +
                            SealedBlob(BlobSpec::Leap(StateKind::kGdn, 8, 16, 16), 2);
  std::string put;
  Record(&put, 0, reg);
  v1::ReservePutRequest reserve;
  reserve.set_namespace_id(1);
  reserve.set_hash(hash);
  reserve.mutable_position()->set_tokens(16);
  reserve.mutable_position()->set_blocks(1);
  Record(&put, 1, reserve);
  v1::UploadPutRequest upload;
  upload.set_put_id(1);
  upload.set_data(blobs);
  Record(&put, 2, upload);
  v1::CommitPutRequest commit;
  commit.set_put_id(1);
  commit.set_crc32c(leapcache::Crc32c(blobs.data(), blobs.size()));
  Record(&put, 3, commit);

  v1::AttachRequest attach;
  attach.mutable_identity()->set_name("seed-engine");
  attach.mutable_identity()->set_pid(1);
  attach.add_offers()->set_kind(v1::TRANSPORT_KIND_UCX);
  attach.add_offers()->set_kind(v1::TRANSPORT_KIND_INLINE);
  v1::RegisterBufferRequest buffer;
  buffer.set_session_id(1);
  buffer.mutable_buffer()->set_transport(v1::TRANSPORT_KIND_UCX);
  buffer.mutable_buffer()->set_memory(v1::MEMORY_KIND_HOST);
  v1::TransferGetRequest get;
  get.set_session_id(1);
  get.set_buffer_id(1);
  get.set_namespace_id(1);
  get.set_hash(hash);
  get.set_offset(4096);
  v1::TransferPutRequest transfer_put;
  transfer_put.set_session_id(1);
  transfer_put.set_buffer_id(1);
  transfer_put.set_namespace_id(1);
  transfer_put.set_hash(std::string(32, '\x22'));
  transfer_put.mutable_position()->set_tokens(32);
  transfer_put.mutable_position()->set_blocks(2);
  transfer_put.set_offset(4096);
  transfer_put.set_length(blobs.size());
  transfer_put.set_crc32c(1);  // odd: the fuzzer fills in the CRC of the bytes it names

  std::string data_plane = put;
  Record(&data_plane, 4, attach);
  Record(&data_plane, 7, buffer);
  Record(&data_plane, 9, get);
  get.mutable_dense()->set_dtype(v1::DTYPE_BF16);
  get.mutable_dense()->set_layout(v1::LAYOUT_VK);
  Record(&data_plane, 9, get);
  Record(&data_plane, 10, transfer_put);
  // The same get and put as a transfer channel's requests.
  v1::TransferChannelRequest through;
  *through.mutable_get() = get;
  through.set_timeout_us(1000000);
  Record(&data_plane, 17, through);
  transfer_put.set_hash(std::string(32, '\x33'));
  *through.mutable_put() = transfer_put;
  Record(&data_plane, 17, through);
  // Lookups through the channel: the put's key (a hit) and an unknown namespace's.
  v1::LookupRequest channel_lookup;
  channel_lookup.set_namespace_id(1);
  channel_lookup.set_chain(get.hash());
  channel_lookup.set_block_tokens(16);
  *through.mutable_lookups()->add_lookups() = channel_lookup;
  channel_lookup.set_namespace_id(9);
  *through.mutable_lookups()->add_lookups() = channel_lookup;
  Record(&data_plane, 17, through);
  v1::KeepaliveRequest keepalive;
  keepalive.set_session_id(1);
  Record(&data_plane, 5, keepalive);
  v1::ReleaseBufferRequest release;
  release.set_session_id(1);
  release.set_buffer_id(1);
  Record(&data_plane, 8, release);
  v1::DetachRequest detach;
  detach.set_session_id(1);
  Record(&data_plane, 6, detach);
  WriteFile(dir / "engine-data-plane", data_plane);

  std::string decode = put;
  v1::OpenDecodeSessionRequest open;
  open.set_namespace_id(1);
  open.set_slots(4);
  Record(&decode, 11, open);
  v1::LoadSlotRequest load;
  load.set_session_id(1);
  load.set_slot(1);
  load.set_hash(hash);
  Record(&decode, 13, load);
  // B = 2 (slot 1 and padding), H = 2, dk = dv = 16, fp32.
  v1::StepRequest step;
  step.set_session_id(1);
  step.set_layer(0);
  step.add_slot(1);
  step.add_slot(-1);
  step.set_dtype(v1::DTYPE_FP32);
  std::vector<float> qk(2 * 2 * 16), g(2 * 2), beta(2 * 2);
  for (size_t i = 0; i < qk.size(); ++i) qk[i] = 0.05f * static_cast<float>(i % 11) - 0.2f;
  for (size_t i = 0; i < g.size(); ++i) g[i] = -0.1f;
  for (size_t i = 0; i < beta.size(); ++i) beta[i] = 0.5f;
  auto bytes = [](const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  step.set_q(bytes(qk));
  step.set_k(bytes(qk));
  step.set_v(bytes(qk));
  step.set_g(bytes(g));
  step.set_beta(bytes(beta));
  Record(&decode, 15, step);
  v1::CommitSlotRequest commit_slot;
  commit_slot.set_session_id(1);
  commit_slot.set_slot(1);
  commit_slot.set_hash(std::string(32, '\x33'));
  Record(&decode, 14, commit_slot);
  // The same step over the data plane: its inputs at 0 of the engine's buffer, o at 65536.
  Record(&decode, 4, attach);
  Record(&decode, 7, buffer);
  v1::StepRequest over = step;
  over.clear_q();
  over.clear_k();
  over.clear_v();
  over.clear_g();
  over.clear_beta();
  over.mutable_buffers()->set_data_plane_session_id(1);
  over.mutable_buffers()->set_buffer_id(1);
  over.mutable_buffers()->set_input_offset(0);
  over.mutable_buffers()->set_output_offset(65536);
  Record(&decode, 15, over);
  v1::ResetSlotRequest reset;
  reset.set_session_id(1);
  reset.set_slot(1);
  Record(&decode, 12, reset);
  v1::CloseDecodeSessionRequest close;
  close.set_session_id(1);
  Record(&decode, 16, close);
  WriteFile(dir / "engine-decode", decode);
}

// peer_descriptor (peer_descriptor_fuzzer.cc's layout): descriptors each backend accepts, with
// transfer lists inside, at and past their ends, and CUDA IPC keys whose ranges fit, touch the
// end or wrap.
void DescriptorCorpus(const fs::path& dir) {
  auto le = [](std::string* out, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  struct Op {
    uint8_t direction, memory;
    uint16_t size;
    uint64_t offset;
  };
  auto seed = [&](const char* name, uint8_t transport, uint8_t memory, uint8_t accepts,
                  uint64_t address, uint64_t bytes, uint64_t allocation, const std::string& key,
                  const std::vector<Op>& ops) {
    std::string out;
    le(&out, transport, 1);
    le(&out, memory, 1);
    le(&out, accepts, 1);
    le(&out, address, 8);
    le(&out, bytes, 8);
    le(&out, allocation, 8);
    le(&out, key.size(), 1);
    out += key;
    for (const Op& op : ops) {
      le(&out, op.direction, 1);
      le(&out, op.memory, 1);
      le(&out, op.size, 2);
      le(&out, op.offset, 8);
    }
    WriteFile(dir / name, out);
  };
  // Transport and memory values as transport.h numbers them: ucx 2, cuda_ipc 4; host 1, cuda 2.
  seed("ucx-host", 2, 1, 0, 0x10000, 65536, 0, "rkey", {{0, 1, 4096, 0}, {1, 1, 4096, 61440}});
  seed("ucx-past-end", 2, 1, 0, 0x10000, 65536, 0, "rkey", {{0, 1, 4096, 61441}});
  std::string ipc(64, '\x5a');
  std::string at_4k = ipc;
  le(&at_4k, 4096, 8);
  seed("ipc-inside", 4, 2, 1 | 4, 0x7f0000000000, 65536, 1 << 20, at_4k, {{0, 2, 512, 0}});
  std::string at_end = ipc;
  le(&at_end, (1 << 20) - 4096, 8);
  seed("ipc-past-allocation", 4, 2, 1 | 4, 0x7f0000000000, 65536, 1 << 20, at_end, {});
  std::string wrap = ipc;
  le(&wrap, UINT64_MAX - 10, 8);
  seed("ipc-wrap", 4, 2, 1 | 4, 0x7f0000000000, 4096, UINT64_MAX, wrap, {});
  seed("nccl-no-key", 3, 2, 1, 0x7f0000000000, 4096, 0, "", {{1, 2, 4096, 0}});
}

// ucx_wire: the first byte picks the blob (0: a worker address, 1: a remote key, 2 and 3: UCX's
// own address and key with edits). Worker
// addresses in both UCX formats, with the fields the walk branches on; the two inputs that
// aborted the server; keys with and without the distance tail.
void UcxWireCorpus(const fs::path& dir) {
  auto seed = [&](const char* name, char which, std::string blob) {
    WriteFile(dir / name, std::string(1, which) + blob);
  };
  const std::string attrs_v2(8, '\x01'), attrs_v1(16, '\x01'), uuid(8, '\x5a');
  // v2, uuid and name; two devices: one with paths, a system device and an address, and one empty.
  seed("addr-v2", 0,
       std::string("\x01\x03", 2) + uuid + "\x04node" + std::string("\x00\x64\x02\x01", 4) +
           "dev1" + "\x12\x34" + attrs_v2 + std::string("\x06", 1) + "iface1" + "\x56\x78" +
           attrs_v2 + "\x82if" + std::string("\x81\x80", 2));
  // v2 with every length extended: md index 40, a 32-byte device and a 64-byte interface address.
  seed("addr-v2-extended", 0,
       std::string("\x01\x00\x7f\x28\x9f\x20", 6) + std::string(32, '\x07') + "\x12\x34" +
           attrs_v2 + std::string("\xbf\x40", 2) + std::string(64, '\x08'));
  // v1: uuid always; 16 attribute bytes.
  seed("addr-v1", 0,
       std::string("\x20", 1) + uuid + std::string("\x01\x84", 2) + "dev0" + "\x12\x34" +
           attrs_v1 + "\x83" "abc");
  seed("addr-empty", 0, std::string("\x01\x00\xff", 3));
  seed("addr-crash-1", 0, "\xff");
  seed("addr-crash-2", 0, std::string("\x02") + std::string(31, '\0'));
  // UCX's own address of a live worker (2) and key (3), as they are and with (position, value)
  // edits: the fuzzer fills in the real blobs where UCX is built.
  seed("real-addr", 2, "");
  seed("real-addr-edits", 2, std::string("\x05\x00\x7f\x14\x00\xff", 6));
  seed("real-key", 3, "");
  seed("real-key-edits", 3, std::string("\x08\x00\x09", 3));
  seed("key-host", 1, std::string("\x05\0\0\0\0\0\0\0\x00\x03" "abc\x01" "d", 15));
  seed("key-cuda-distances", 1,
       std::string("\x01\0\0\0\0\0\0\0\x01\x08", 10) + std::string(8, '\x11') +
           std::string("\x02\x00\x10\x20\x01\x30\x40", 7));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out(argv[1]);
  for (const char* target : {"blob_parser", "npy_reader", "config_loader", "proto_request",
                             "ucx_wire", "engine_request", "peer_descriptor"}) {
    fs::remove_all(out / target);
    fs::create_directories(out / target);
  }
  BlobCorpus(out / "blob_parser");
  NpyCorpus(out / "npy_reader");
  ConfigCorpus(out / "config_loader");
  ProtoCorpus(out / "proto_request");
  UcxWireCorpus(out / "ucx_wire");
  EngineCorpus(out / "engine_request");
  DescriptorCorpus(out / "peer_descriptor");
  return 0;
}
