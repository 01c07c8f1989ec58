// leapcache-cli: a command-line client of the leapcache service, on the C++ client library.
//
//   leapcache-cli [--server HOST:PORT] [TLS and token options] COMMAND [OPTIONS]
//
// TLS and token options (cli_security.h): --tls-ca FILE [--tls-cert FILE --tls-key FILE]
// [--tls-server-name NAME] [--token-file FILE]; the token may also come from $LEAPCACHE_TOKEN.
//
//   register --tenant T --layers L --heads H [--dk 128] [--dv 128] [--kind gdn|kda]
//            [--codec leap|fp32|bf16|fp16|int-row|int-col] [--bits 8] [--p 16] [--r 4]
//            [--smoothing true] [--flops-per-token F]
//            [--conv-channels C --conv-width W [--conv-dtype bf16|fp16|fp32]] [--extra-bytes N]
//   put      --namespace N KEY (--state S.npy [--state S2.npy ...] [--layout kv|vk]
//                               | --compact BLOBS.bin) [--heads B:E] [--ttl 30s]
//   lookup   --namespace N CHAIN --block-tokens N [--heads B:E] [--max-depth D]
//   get      --namespace N --hash HEX (--out S.npy [--layout kv|vk] [--dtype fp32|bf16]
//                                      | --compact-out BLOBS.bin) [--heads B:E]
//   delete | pin | unpin  --namespace N --hash HEX
//   stats | health
//
// KEY is --hash HEX --blocks B --tokens T, or --tokens-file F --block-tokens N (the checkpoint
// after the file's last full block). CHAIN is --tokens-file F (token ids separated by spaces,
// commas or newlines; hashed with --block-tokens) or --hashes HEX,HEX,...
// States in .npy files are float32 [layers, heads, dk, dv] ([.., dv, dk] with --layout vk); a
// file of [heads, dk, dv] is one layer, and several files stack along layers. `get --out`
// writes float32 .npy ([layers, heads, dk, dv] or [.., dv, dk]); bf16 is decoded to float32.
// For a namespace with a conv state or extra bytes, --compact and --compact-out files hold whole
// units (each blob followed by its side state, types.proto); .npy states do not carry them.
// The server defaults to $LEAPCACHE_SERVER, else 127.0.0.1:7470. Exit status: 0 on success
// (health: serving), 1 on a failed call, 2 on bad usage.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/mutex_deadlock_detection.h"
#include "client/cli/cli_args.h"
#include "client/cli/cli_security.h"
#include "gpu/format/format.h"
#include "gpu/format/half.h"
#include "gpu/tools/npy.h"
#include "leapcache/client.h"

namespace leapcache::cli {
namespace {

using client::BlockHash;
using client::Client;

constexpr int kUsageError = 2;

constexpr char kUsage[] =
    "usage: leapcache-cli [--server HOST:PORT] [--timeout 120s] COMMAND [OPTIONS]\n"
    "  register --tenant T --layers L --heads H [--dk 128] [--dv 128] [--kind gdn|kda]\n"
    "           [--codec leap|fp32|bf16|fp16|int-row|int-col] [--bits 8] [--p 16] [--r 4]\n"
    "           [--smoothing true] [--flops-per-token F]\n"
    "           [--conv-channels C --conv-width W [--conv-dtype bf16|fp16|fp32]]\n"
    "           [--extra-bytes N]\n"
    "  put      --namespace N KEY (--state S.npy [--state S2.npy ...] [--layout kv|vk]\n"
    "                              | --compact BLOBS.bin) [--heads B:E] [--ttl 30s]\n"
    "  lookup   --namespace N CHAIN --block-tokens N [--heads B:E] [--max-depth D]\n"
    "  get      --namespace N --hash HEX (--out S.npy [--layout kv|vk] [--dtype fp32|bf16]\n"
    "                                     | --compact-out BLOBS.bin) [--heads B:E]\n"
    "  delete | pin | unpin  --namespace N --hash HEX\n"
    "  stats | health\n"
    "KEY: --hash HEX --blocks B --tokens T, or --tokens-file F --block-tokens N (the checkpoint\n"
    "after the file's last full block). CHAIN: --tokens-file F or --hashes HEX,HEX,...\n"
    "States: float32 .npy [layers, heads, dk, dv] ([.., dv, dk] with --layout vk); several\n"
    "--state files stack along layers. The server defaults to $LEAPCACHE_SERVER.\n"
    "TLS and tokens (before or after COMMAND): --tls-ca FILE [--tls-cert FILE --tls-key FILE]\n"
    "[--tls-server-name NAME] [--tls true] [--token-file FILE]; or $LEAPCACHE_TOKEN.\n";

// A failed call (exit 1) or bad usage (exit 2), with its message.
struct Failure {
  int exit_code;
  std::string message;
};

absl::Status FromFormat(const leapcache::Status& st) {
  return st.ok() ? absl::OkStatus()
                 : absl::Status(static_cast<absl::StatusCode>(static_cast<int>(st.code())),
                                st.message());
}

absl::StatusOr<client::HeadRange> ParseHeads(const Args& args) {
  if (!args.Has("heads")) return client::HeadRange{};
  const std::vector<std::string> parts = absl::StrSplit(args.Get("heads", ""), ':');
  int b = 0, e = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &b) || !absl::SimpleAtoi(parts[1], &e) ||
      b < 0 || e <= b) {
    return absl::InvalidArgumentError("--heads must be BEGIN:END with 0 <= BEGIN < END");
  }
  return client::HeadRange{b, e};
}

absl::StatusOr<client::Layout> ParseLayout(const Args& args) {
  const std::string v = args.Get("layout", "kv");
  if (v == "kv") return client::Layout::kKV;
  if (v == "vk") return client::Layout::kVK;
  return absl::InvalidArgumentError("--layout must be kv or vk");
}

absl::StatusOr<std::vector<uint32_t>> ReadTokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<uint32_t> tokens;
  for (absl::string_view t : absl::StrSplit(text, absl::ByAnyChar(" ,\t\r\n"), absl::SkipEmpty())) {
    uint32_t v = 0;
    if (!absl::SimpleAtoi(t, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": \"", t, "\" is not a token id"));
    }
    tokens.push_back(v);
  }
  return tokens;
}

absl::StatusOr<std::vector<BlockHash>> ChainFromTokens(const Args& args, int64_t block_tokens) {
  absl::StatusOr<std::string> path = args.Required("tokens-file");
  if (!path.ok()) return path.status();
  absl::StatusOr<std::vector<uint32_t>> tokens = ReadTokens(*path);
  if (!tokens.ok()) return tokens.status();
  return client::ChainHashes(*tokens, block_tokens);
}

absl::StatusOr<BlockHash> RequiredHash(const Args& args) {
  absl::StatusOr<std::string> hex = args.Required("hash");
  if (!hex.ok()) return hex.status();
  return client::HashFromHex(*hex);
}

std::span<const uint8_t> AsBytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

absl::Status WriteFile(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

absl::Status Register(Client& c, const Args& args) {
  client::NamespaceSpec spec;
  absl::StatusOr<std::string> tenant = args.Required("tenant");
  if (!tenant.ok()) return tenant.status();
  spec.tenant = *tenant;
  const std::string kind = args.Get("kind", "gdn");
  if (kind != "gdn" && kind != "kda")
    return absl::InvalidArgumentError("--kind must be gdn or kda");
  spec.model.kind = kind == "gdn" ? client::StateKind::kGdn : client::StateKind::kKda;
  const std::string codec = args.Get("codec", "leap");
  const std::pair<const char*, client::Codec> codecs[] = {
      {"fp32", client::Codec::kFp32},      {"bf16", client::Codec::kBf16},
      {"fp16", client::Codec::kFp16},      {"int-row", client::Codec::kIntRow},
      {"int-col", client::Codec::kIntCol}, {"leap", client::Codec::kLeap}};
  bool known = false;
  for (const auto& [name, value] : codecs) {
    if (codec == name) {
      spec.format.codec = value;
      known = true;
    }
  }
  if (!known)
    return absl::InvalidArgumentError("--codec must be leap, fp32, bf16, fp16, int-row or int-col");
  const int64_t default_bits =
      spec.format.codec == client::Codec::kFp32                                                ? 32
      : spec.format.codec == client::Codec::kBf16 || spec.format.codec == client::Codec::kFp16 ? 16
                                                                                               : 8;
  absl::StatusOr<int64_t> layers = args.Int("layers", 0), heads = args.Int("heads", 0),
                          dk = args.Int("dk", 128), dv = args.Int("dv", 128),
                          bits = args.Int("bits", default_bits);
  for (const auto* v : {&layers, &heads, &dk, &dv, &bits}) {
    if (!v->ok()) return v->status();
  }
  spec.model.linear_layers = static_cast<int>(*layers);
  spec.model.total_heads = static_cast<int>(*heads);
  spec.model.dk = static_cast<int>(*dk);
  spec.model.dv = static_cast<int>(*dv);
  const bool leap = spec.format.codec == client::Codec::kLeap;
  const client::StorageFormat preset = client::StorageFormat::Leap(static_cast<int>(*bits));
  absl::StatusOr<int64_t> p = args.Int("p", leap ? preset.p : 1);
  absl::StatusOr<int64_t> r = args.Int("r", leap ? preset.r : 0);
  absl::StatusOr<bool> smoothing = args.Bool("smoothing", leap);
  absl::StatusOr<double> flops = args.Number("flops-per-token", 0);
  if (!p.ok()) return p.status();
  if (!r.ok()) return r.status();
  if (!smoothing.ok()) return smoothing.status();
  if (!flops.ok()) return flops.status();
  spec.format.bits = static_cast<int>(*bits);
  spec.format.p = static_cast<int>(*p);
  spec.format.r = static_cast<int>(*r);
  spec.format.smoothing = *smoothing;
  spec.flops_per_token = *flops;
  // The conv state and extra bytes stored with every (layer, head) (types.proto ConvShape).
  absl::StatusOr<int64_t> conv_channels = args.Int("conv-channels", 0),
                          conv_width = args.Int("conv-width", 0),
                          extra_bytes = args.Int("extra-bytes", 0);
  for (const auto* v : {&conv_channels, &conv_width, &extra_bytes}) {
    if (!v->ok()) return v->status();
  }
  if (*conv_channels != 0 || *conv_width != 0) {
    absl::StatusOr<client::ConvDType> dtype =
        client::ConvDTypeFromName(args.Get("conv-dtype", "bf16"));
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--conv-dtype: ", dtype.status().message()));
    }
    spec.model.conv = client::ConvShape{static_cast<int>(*conv_channels),
                                        static_cast<int>(*conv_width), *dtype};
  }
  spec.model.extra_bytes = static_cast<int>(*extra_bytes);
  absl::StatusOr<client::NamespaceInfo> info = c.RegisterNamespace(spec);
  if (!info.ok()) return info.status();
  std::printf(
      "namespace_id: %u\nfingerprint: %s\nformat: %s\nblob_bytes: %llu\nside_bytes: %llu\n",
      info->id, info->fingerprint.c_str(), info->format_label.c_str(),
      static_cast<unsigned long long>(info->blob_bytes),
      static_cast<unsigned long long>(info->side_bytes));
  return absl::OkStatus();
}

// The states of the --state files stacked along layers, as fp32 bytes.
absl::StatusOr<std::vector<float>> ReadStates(const Args& args) {
  std::vector<float> states;
  std::vector<int64_t> inner;  // [heads, a, b] of the first file
  for (const std::string& path : args.All("state")) {
    StatusOr<tools::NpyArray> a = tools::ReadNpy(path);
    if (!a.ok()) return FromFormat(a.status());
    if (absl::Status st = FromFormat(tools::CheckFinite(path, *a)); !st.ok()) return st;
    std::vector<int64_t> shape = a->shape;
    if (shape.size() == 3) shape.insert(shape.begin(), 1);
    if (shape.size() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": expected [layers, heads, dk, dv] or [heads, dk, dv], got ",
                       tools::ShapeToString(a->shape)));
    }
    const std::vector<int64_t> rest(shape.begin() + 1, shape.end());
    if (inner.empty()) inner = rest;
    if (rest != inner) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": shape ", tools::ShapeToString(a->shape), " does not stack with the first file"));
    }
    states.insert(states.end(), a->data.begin(), a->data.end());
  }
  if (inner.empty()) return absl::InvalidArgumentError("--state or --compact is required");
  return states;
}

absl::Status Put(Client& c, const Args& args) {
  client::PutTarget target;
  absl::StatusOr<int64_t> ns = args.Int("namespace", 0);
  if (!ns.ok()) return ns.status();
  target.namespace_id = static_cast<uint32_t>(*ns);
  if (args.Has("tokens-file")) {
    absl::StatusOr<int64_t> block = args.Int("block-tokens", 0);
    if (!block.ok()) return block.status();
    absl::StatusOr<std::vector<BlockHash>> chain = ChainFromTokens(args, *block);
    if (!chain.ok()) return chain.status();
    if (chain->empty()) return absl::InvalidArgumentError("the tokens fill no whole block");
    target.hash = chain->back();
    target.position = {static_cast<int64_t>(chain->size()) * *block,
                       static_cast<int64_t>(chain->size())};
  } else {
    absl::StatusOr<BlockHash> hash = RequiredHash(args);
    absl::StatusOr<int64_t> blocks = args.Int("blocks", 0), tokens = args.Int("tokens", 0);
    if (!hash.ok()) return hash.status();
    if (!blocks.ok()) return blocks.status();
    if (!tokens.ok()) return tokens.status();
    target.hash = *hash;
    target.position = {*tokens, *blocks};
  }
  absl::StatusOr<client::HeadRange> heads = ParseHeads(args);
  absl::StatusOr<absl::Duration> ttl = args.Duration("ttl", absl::ZeroDuration());
  if (!heads.ok()) return heads.status();
  if (!ttl.ok()) return ttl.status();
  target.heads = *heads;
  target.ttl = *ttl;
  absl::Status st;
  if (args.Has("compact")) {
    absl::StatusOr<std::vector<uint8_t>> blobs = ReadFile(args.Get("compact", ""));
    if (!blobs.ok()) return blobs.status();
    st = c.PutCompact(target, *blobs);
  } else {
    absl::StatusOr<client::Layout> layout = ParseLayout(args);
    if (!layout.ok()) return layout.status();
    absl::StatusOr<std::vector<float>> states = ReadStates(args);
    if (!states.ok()) return states.status();
    st = c.PutDense(target, {client::DType::kFp32, *layout}, AsBytes(*states));
  }
  if (!st.ok()) return st;
  std::printf("committed: %s at %lld blocks, %lld tokens\n", client::HashToHex(target.hash).c_str(),
              static_cast<long long>(target.position.blocks),
              static_cast<long long>(target.position.tokens));
  return absl::OkStatus();
}

absl::Status Lookup(Client& c, const Args& args) {
  absl::StatusOr<int64_t> ns = args.Int("namespace", 0), block = args.Int("block-tokens", 0),
                          depth = args.Int("max-depth", 0);
  absl::StatusOr<client::HeadRange> heads = ParseHeads(args);
  for (const auto* v : {&ns, &block, &depth}) {
    if (!v->ok()) return v->status();
  }
  if (!heads.ok()) return heads.status();
  std::vector<BlockHash> chain;
  if (args.Has("hashes")) {
    for (absl::string_view hex : absl::StrSplit(args.Get("hashes", ""), ',', absl::SkipEmpty())) {
      absl::StatusOr<BlockHash> h = client::HashFromHex(std::string(hex));
      if (!h.ok()) return h.status();
      chain.push_back(*h);
    }
  } else {
    absl::StatusOr<std::vector<BlockHash>> from_tokens = ChainFromTokens(args, *block);
    if (!from_tokens.ok()) return from_tokens.status();
    chain = std::move(from_tokens).value();
  }
  client::LookupRequest q;
  q.namespace_id = static_cast<uint32_t>(*ns);
  q.chain = chain;
  q.heads = *heads;
  q.max_depth = static_cast<int>(*depth);
  q.block_tokens = *block;
  absl::StatusOr<client::LookupResult> r = c.Lookup(q);
  if (!r.ok()) return r.status();
  if (!r->hit) {
    std::printf("hit: false\n");
    return absl::OkStatus();
  }
  std::printf("hit: true\nindex: %d\nblocks: %lld\ntokens: %lld\nhash: %s\n", r->index,
              static_cast<long long>(r->position.blocks),
              static_cast<long long>(r->position.tokens),
              client::HashToHex(chain[r->index]).c_str());
  return absl::OkStatus();
}

absl::Status Get(Client& c, const Args& args) {
  client::GetRequest q;
  absl::StatusOr<int64_t> ns = args.Int("namespace", 0);
  absl::StatusOr<BlockHash> hash = RequiredHash(args);
  absl::StatusOr<client::HeadRange> heads = ParseHeads(args);
  if (!ns.ok()) return ns.status();
  if (!hash.ok()) return hash.status();
  if (!heads.ok()) return heads.status();
  q.namespace_id = static_cast<uint32_t>(*ns);
  q.hash = *hash;
  q.heads = *heads;
  const bool compact = args.Has("compact-out");
  if (!compact && !args.Has("out"))
    return absl::InvalidArgumentError("--out or --compact-out is required");
  if (!compact) {
    absl::StatusOr<client::Layout> layout = ParseLayout(args);
    if (!layout.ok()) return layout.status();
    const std::string dtype = args.Get("dtype", "fp32");
    if (dtype != "fp32" && dtype != "bf16")
      return absl::InvalidArgumentError("--dtype must be fp32 or bf16");
    q.dense = client::DenseEncoding{dtype == "fp32" ? client::DType::kFp32 : client::DType::kBf16,
                                    *layout};
  }
  absl::StatusOr<client::Checkpoint> cp = c.Get(q);
  if (!cp.ok()) return cp.status();
  if (compact) {
    if (absl::Status st = WriteFile(args.Get("compact-out", ""), cp->bytes); !st.ok()) return st;
  } else {
    const size_t n = cp->bytes.size() / (q.dense->dtype == client::DType::kFp32 ? 4 : 2);
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) {
      if (q.dense->dtype == client::DType::kFp32) {
        std::memcpy(&values[i], cp->bytes.data() + 4 * i, 4);
      } else {
        values[i] = Bf16ToFloat(LoadU16(cp->bytes.data() + 2 * i));
      }
    }
    const bool kv = q.dense->layout == client::Layout::kKV;
    const std::vector<int64_t> shape = {cp->layers, cp->heads.size(), kv ? cp->dk : cp->dv,
                                        kv ? cp->dv : cp->dk};
    if (absl::Status st = FromFormat(tools::WriteNpy(args.Get("out", ""), shape, values));
        !st.ok()) {
      return st;
    }
  }
  std::printf("read: %zu bytes, %d layers, heads %d:%d, position %lld blocks, %lld tokens\n",
              cp->bytes.size(), cp->layers, cp->heads.begin, cp->heads.end,
              static_cast<long long>(cp->position.blocks),
              static_cast<long long>(cp->position.tokens));
  return absl::OkStatus();
}

absl::Status KeyCommand(Client& c, const Args& args, const std::string& command) {
  absl::StatusOr<int64_t> ns = args.Int("namespace", 0);
  absl::StatusOr<BlockHash> hash = RequiredHash(args);
  if (!ns.ok()) return ns.status();
  if (!hash.ok()) return hash.status();
  const uint32_t id = static_cast<uint32_t>(*ns);
  absl::Status st = command == "delete" ? c.Delete(id, *hash)
                    : command == "pin"  ? c.Pin(id, *hash)
                                        : c.Unpin(id, *hash);
  if (st.ok()) std::printf("%s: ok\n", command.c_str());
  return st;
}

absl::Status Stats(Client& c) {
  absl::StatusOr<client::ServerStats> s = c.Stats();
  if (!s.ok()) return s.status();
  for (const client::TierStats& t : s->tiers) {
    std::printf("tier %s: %llu / %llu bytes used, %llu reserved, %llu checkpoints\n",
                t.name.c_str(), static_cast<unsigned long long>(t.used_bytes),
                static_cast<unsigned long long>(t.capacity_bytes),
                static_cast<unsigned long long>(t.reserved_bytes),
                static_cast<unsigned long long>(t.checkpoints));
  }
  for (const client::FormatMemoryStats& m : s->memory) {
    std::printf("memory %s/%s: %llu blobs, %llu physical bytes, %llu fp32-equivalent bytes\n",
                m.tier.c_str(), m.format.c_str(), static_cast<unsigned long long>(m.blobs),
                static_cast<unsigned long long>(m.physical_bytes),
                static_cast<unsigned long long>(m.fp32_equivalent_bytes));
  }
  const std::pair<const char*, uint64_t> fields[] = {{"namespaces", s->namespaces},
                                                     {"checkpoints", s->checkpoints},
                                                     {"pending_puts", s->pending_puts},
                                                     {"leases", s->leases},
                                                     {"pinned", s->pinned},
                                                     {"lookups", s->lookups},
                                                     {"lookup_hits", s->lookup_hits},
                                                     {"lookup_misses", s->lookup_misses},
                                                     {"lookup_hit_tokens", s->lookup_hit_tokens},
                                                     {"lookup_miss_tokens", s->lookup_miss_tokens},
                                                     {"puts_committed", s->puts_committed},
                                                     {"puts_rejected", s->puts_rejected},
                                                     {"puts_aborted", s->puts_aborted},
                                                     {"puts_expired", s->puts_expired},
                                                     {"gets", s->gets},
                                                     {"get_hits", s->get_hits},
                                                     {"evictions", s->evictions},
                                                     {"spills", s->spills},
                                                     {"promotions", s->promotions},
                                                     {"bytes_in", s->bytes_in},
                                                     {"bytes_out", s->bytes_out}};
  for (const auto& [name, v] : fields) {
    std::printf("%s: %llu\n", name, static_cast<unsigned long long>(v));
  }
  if (!s->tenant.tenant.empty()) {  // the server authenticates tenants: the caller's own
    const client::TenantUsage& t = s->tenant;
    auto quota = [](uint64_t q) { return q == 0 ? std::string("no limit") : std::to_string(q); };
    std::printf("tenant %s: %llu bytes (quota %s), %llu pinned (quota %s), %llu pending puts "
                "(quota %s), %llu namespaces (quota %s)\n",
                t.tenant.c_str(), static_cast<unsigned long long>(t.bytes),
                quota(t.quota_bytes).c_str(), static_cast<unsigned long long>(t.pinned_bytes),
                quota(t.quota_pinned_bytes).c_str(),
                static_cast<unsigned long long>(t.pending_puts),
                quota(t.quota_pending_puts).c_str(), static_cast<unsigned long long>(t.namespaces),
                quota(t.quota_namespaces).c_str());
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty() || words[0] == "--help" || words[0] == "-h" || words[0] == "help") {
    std::fputs(kUsage, words.empty() ? stderr : stdout);
    return words.empty() ? kUsageError : 0;
  }
  // The command is the first word that is not an option or an option's value.
  std::string command;
  std::vector<std::string> rest;
  for (size_t i = 0; i < words.size(); ++i) {
    if (command.empty() && words[i].rfind("--", 0) != 0) {
      command = words[i];
      continue;
    }
    rest.push_back(words[i]);
    if (command.empty() && words[i].find('=') == std::string::npos && i + 1 < words.size()) {
      rest.push_back(words[++i]);  // a global option's value
    }
  }
  absl::StatusOr<Args> args = Args::Parse(rest, {"state"});
  if (!args.ok()) {
    std::fprintf(stderr, "leapcache-cli: %s\n", std::string(args.status().message()).c_str());
    return kUsageError;
  }
  const std::set<std::string> common = {"server", "timeout"};
  const std::map<std::string, std::set<std::string>> options = {
      {"register",
       {"tenant", "layers", "heads", "dk", "dv", "kind", "codec", "bits", "p", "r", "smoothing",
        "flops-per-token", "conv-channels", "conv-width", "conv-dtype", "extra-bytes"}},
      {"put",
       {"namespace", "hash", "blocks", "tokens", "tokens-file", "block-tokens", "state", "layout",
        "compact", "heads", "ttl"}},
      {"lookup", {"namespace", "tokens-file", "hashes", "block-tokens", "heads", "max-depth"}},
      {"get", {"namespace", "hash", "out", "compact-out", "layout", "dtype", "heads"}},
      {"delete", {"namespace", "hash"}},
      {"pin", {"namespace", "hash"}},
      {"unpin", {"namespace", "hash"}},
      {"stats", {}},
      {"health", {}}};
  auto known = options.find(command);
  if (known == options.end()) {
    std::fprintf(stderr, "leapcache-cli: unknown command \"%s\" (see --help)\n", command.c_str());
    return kUsageError;
  }
  std::set<std::string> allowed = known->second;
  allowed.insert(common.begin(), common.end());
  allowed.insert(SecurityOptionNames().begin(), SecurityOptionNames().end());
  if (absl::Status st = args->CheckKnown(allowed); !st.ok()) {
    std::fprintf(stderr, "leapcache-cli %s: %s\n", command.c_str(),
                 std::string(st.message()).c_str());
    return kUsageError;
  }

  client::ClientOptions options_;
  const char* env_server = std::getenv("LEAPCACHE_SERVER");
  options_.target = args->Get("server", env_server != nullptr ? env_server : options_.target);
  absl::StatusOr<absl::Duration> timeout = args->Duration("timeout", absl::Seconds(120));
  if (!timeout.ok()) {
    std::fprintf(stderr, "leapcache-cli: %s\n", std::string(timeout.status().message()).c_str());
    return kUsageError;
  }
  options_.connect_timeout = std::min(*timeout, absl::Seconds(10));
  options_.rpc_timeout = *timeout;
  options_.transfer_timeout = *timeout;
  if (absl::Status security = ApplySecurityOptions(*args, &options_); !security.ok()) {
    std::fprintf(stderr, "leapcache-cli: %s\n", std::string(security.message()).c_str());
    return kUsageError;
  }
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(options_);
  absl::Status st = c.status();
  if (st.ok()) {
    Client& cl = **c;
    if (command == "register")
      st = Register(cl, *args);
    else if (command == "put")
      st = Put(cl, *args);
    else if (command == "lookup")
      st = Lookup(cl, *args);
    else if (command == "get")
      st = Get(cl, *args);
    else if (command == "stats")
      st = Stats(cl);
    else if (command == "health") {
      absl::StatusOr<bool> serving = cl.CheckHealth();
      st = serving.status();
      if (st.ok()) {
        std::printf("%s\n", *serving ? "SERVING" : "NOT_SERVING");
        if (!*serving) return 1;
      }
    } else {
      st = KeyCommand(cl, *args, command);
    }
  }
  if (!st.ok()) {
    std::fprintf(stderr, "leapcache-cli %s: %s\n", command.c_str(), st.ToString().c_str());
    return absl::IsInvalidArgument(st) && !c.ok() ? kUsageError : 1;
  }
  return 0;
}

}  // namespace
}  // namespace leapcache::cli

int main(int argc, char** argv) {
  leapcache::base::StopMutexDeadlockDetection();
  return leapcache::cli::Main(argc, argv);
}
