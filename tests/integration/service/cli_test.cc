// leapcache-cli against the real server: register, put a state from .npy files (token-file
// keys), lookup, get back to .npy (fp32 and bf16, both layouts, a head range), get the compact
// blobs, delete, stats, health, and usage errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpu/tools/npy.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

class CliTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    dir_ = MakeTempDir("cli");
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    ServiceTest::TearDown();
  }

  RunResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {LEAPCACHE_CLI_BIN, "--server", server_->target()});
    absl::StatusOr<RunResult> r = RunProgram(args);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  }

  // The value of "key: value" in a command's output.
  static std::string Field(const std::string& output, const std::string& key) {
    for (absl::string_view line : absl::StrSplit(output, '\n')) {
      if (absl::StartsWith(line, key + ": ")) return std::string(line.substr(key.size() + 2));
    }
    return "";
  }

  std::string dir_;
};

TEST_F(CliTest, RegisterPutLookupGetDelete) {
  RunResult r = Cli({"register", "--tenant", "cli", "--layers", "3", "--heads", "4", "--dk", "32",
                     "--dv", "32", "--kind", "kda"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ns = Field(r.output, "namespace_id");
  EXPECT_EQ(Field(r.output, "format"), "leap8");
  EXPECT_EQ(Field(r.output, "fingerprint").size(), 64u);

  // States: two files stacked along layers ([2, 4, 32, 32] and one layer [4, 32, 32]).
  client::NamespaceSpec spec = SmallNamespace("cli", 3, 4, 32);
  spec.model.kind = client::StateKind::kKda;
  const std::vector<float> states = MakeStates(spec, 77);
  const size_t per_layer = 4 * 32 * 32;
  const std::vector<int64_t> shape_a = {2, 4, 32, 32}, shape_b = {4, 32, 32};
  ASSERT_TRUE(
      tools::WriteNpy(dir_ + "/a.npy", shape_a, std::span(states).first(2 * per_layer)).ok());
  ASSERT_TRUE(
      tools::WriteNpy(dir_ + "/b.npy", shape_b, std::span(states).subspan(2 * per_layer)).ok());
  {
    std::ofstream tokens(dir_ + "/tokens.txt");
    for (int i = 0; i < 100; ++i) tokens << i * 3 << (i % 10 == 9 ? "\n" : " ");
  }
  r = Cli({"put", "--namespace", ns, "--tokens-file", dir_ + "/tokens.txt", "--block-tokens", "32",
           "--state", dir_ + "/a.npy", "--state", dir_ + "/b.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "at 3 blocks, 96 tokens")) << r.output;

  r = Cli(
      {"lookup", "--namespace", ns, "--tokens-file", dir_ + "/tokens.txt", "--block-tokens", "32"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Field(r.output, "hit"), "true");
  EXPECT_EQ(Field(r.output, "index"), "2");
  EXPECT_EQ(Field(r.output, "tokens"), "96");
  const std::string hash = Field(r.output, "hash");
  ASSERT_EQ(hash.size(), 64u);

  // fp32 [K,V]: within the codec's error of what was put.
  r = Cli({"get", "--namespace", ns, "--hash", hash, "--out", dir_ + "/kv.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  StatusOr<tools::NpyArray> kv = tools::ReadNpy(dir_ + "/kv.npy");
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->shape, (std::vector<int64_t>{3, 4, 32, 32}));
  EXPECT_LT(RelativeError(states, kv->data), 0.02);
  // bf16 [V,K] of heads 1..2 is the transpose of the same states, rounded to bf16.
  r = Cli({"get", "--namespace", ns, "--hash", hash, "--out", dir_ + "/vk.npy", "--layout", "vk",
           "--dtype", "bf16", "--heads", "1:3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  StatusOr<tools::NpyArray> vk = tools::ReadNpy(dir_ + "/vk.npy");
  ASSERT_TRUE(vk.ok());
  EXPECT_EQ(vk->shape, (std::vector<int64_t>{3, 2, 32, 32}));
  client::NamespaceSpec two = spec;
  two.model.total_heads = 2;
  const std::vector<float> expected = FromBf16Bytes(
      ToBf16Bytes(ToLayout(two, SliceHeads(spec, kv->data, 1, 3), client::Layout::kVK)));
  EXPECT_TRUE(vk->data == expected);
  // The compact blobs are what the reference codec makes of the states.
  r = Cli({"get", "--namespace", ns, "--hash", hash, "--compact-out", dir_ + "/blobs.bin"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir_ + "/blobs.bin", std::ios::binary);
  const std::vector<uint8_t> blobs((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  EXPECT_TRUE(blobs == EncodeBlobs(spec, states));

  r = Cli({"stats"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(Field(r.output, "checkpoints"), "1");
  r = Cli({"health"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "SERVING\n");
  EXPECT_EQ(Cli({"delete", "--namespace", ns, "--hash", hash}).exit_code, 0);
  r = Cli(
      {"lookup", "--namespace", ns, "--tokens-file", dir_ + "/tokens.txt", "--block-tokens", "32"});
  EXPECT_EQ(Field(r.output, "hit"), "false");
  EXPECT_EQ(Cli({"delete", "--namespace", ns, "--hash", hash}).exit_code, 1);  // NOT_FOUND
}

TEST_F(CliTest, RegisterWithAConvStateAndMoveWholeUnits) {
  RunResult r = Cli({"register", "--tenant", "cli-conv", "--layers", "1", "--heads", "2", "--dk",
                     "16", "--dv", "16", "--conv-channels", "8", "--conv-width", "3",
                     "--conv-dtype", "fp16", "--extra-bytes", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ns = Field(r.output, "namespace_id");
  EXPECT_EQ(Field(r.output, "side_bytes"), "26");  // 4 channels x 3 x 2 bytes + 2 per head
  uint64_t blob_bytes = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Field(r.output, "blob_bytes"), &blob_bytes));
  // Whole units (the blob, then its side state) from a file, and back.
  client::NamespaceSpec spec = SmallNamespace("cli-conv", 1, 2, 16);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 5));
  std::vector<uint8_t> units;
  for (int u = 0; u < 2; ++u) {
    units.insert(units.end(), blobs.begin() + u * blob_bytes, blobs.begin() + (u + 1) * blob_bytes);
    for (int i = 0; i < 26; ++i) units.push_back(static_cast<uint8_t>(u * 26 + i));
  }
  {
    std::ofstream f(dir_ + "/units.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(units.data()), static_cast<std::streamsize>(units.size()));
  }
  const std::string hash = client::HashToHex(TestHash(9));
  r = Cli({"put", "--namespace", ns, "--hash", hash, "--blocks", "1", "--tokens", "16",
           "--compact", dir_ + "/units.bin"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Cli({"get", "--namespace", ns, "--hash", hash, "--compact-out", dir_ + "/got.bin"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir_ + "/got.bin", std::ios::binary);
  const std::vector<uint8_t> got((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
  EXPECT_TRUE(got == units);
  // An unknown conv dtype is refused before anything is registered.
  EXPECT_EQ(Cli({"register", "--tenant", "cli-conv", "--layers", "1", "--heads", "2",
                 "--conv-channels", "8", "--conv-width", "3", "--conv-dtype", "int8"})
                .exit_code,
            1);
}

TEST_F(CliTest, UsageErrors) {
  EXPECT_EQ(Cli({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(Cli({"stats", "--bogus", "1"}).exit_code, 2);
  EXPECT_EQ(Cli({"get", "--namespace"}).exit_code, 2);
  // A shape that does not match the namespace is the server's INVALID_ARGUMENT: exit 1.
  ASSERT_EQ(Cli({"register", "--tenant", "u", "--layers", "1", "--heads", "2", "--dk", "16", "--dv",
                 "16"})
                .exit_code,
            0);
  const std::vector<float> wrong(3 * 16 * 16, 1.0f);
  const std::vector<int64_t> shape = {1, 3, 16, 16};
  ASSERT_TRUE(tools::WriteNpy(dir_ + "/w.npy", shape, wrong).ok());
  const RunResult r = Cli({"put", "--namespace", "1", "--hash", client::HashToHex(TestHash(1)),
                           "--blocks", "1", "--tokens", "16", "--state", dir_ + "/w.npy"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(Stats().checkpoints, 0u);
  EXPECT_EQ(Stats().pending_puts, 0u);
}

}  // namespace
}  // namespace leapcache::testing
