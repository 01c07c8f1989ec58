#include "base/block_hash.h"

#include <openssl/evp.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace leapcache::base {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

MdCtx NewCtx() {
  MdCtx ctx(EVP_MD_CTX_new());
  LC_CHECK(ctx != nullptr, "EVP_MD_CTX_new failed (out of memory)");
  return ctx;
}

// OpenSSL's SHA-256 fails only on allocation failure or a broken provider setup: both are
// environment faults no caller can handle, so they abort rather than become a status.
void Check(int ok, const char* what) { LC_CHECK(ok == 1, what); }

BlockHash HashWith(EVP_MD_CTX* ctx, const BlockHash& parent, std::span<const uint32_t> tokens,
                   std::span<const uint8_t> extras) {
  LC_CHECK(extras.size() <= kMaxExtrasBytes, "HashBlock: extras too long");
  Check(EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr), "EVP_DigestInit_ex(sha256) failed");
  Check(EVP_DigestUpdate(ctx, parent.data(), parent.size()), "EVP_DigestUpdate failed");
  // Tokens as little-endian u32, staged in chunks so the encoding is the same on any host.
  uint8_t buf[1024];
  size_t n = 0;
  for (uint32_t t : tokens) {
    buf[n++] = static_cast<uint8_t>(t);
    buf[n++] = static_cast<uint8_t>(t >> 8);
    buf[n++] = static_cast<uint8_t>(t >> 16);
    buf[n++] = static_cast<uint8_t>(t >> 24);
    if (n == sizeof(buf)) {
      Check(EVP_DigestUpdate(ctx, buf, n), "EVP_DigestUpdate failed");
      n = 0;
    }
  }
  if (n > 0) Check(EVP_DigestUpdate(ctx, buf, n), "EVP_DigestUpdate failed");
  if (!extras.empty()) {
    Check(EVP_DigestUpdate(ctx, extras.data(), extras.size()), "EVP_DigestUpdate failed");
  }
  BlockHash out;
  unsigned int len = 0;
  Check(EVP_DigestFinal_ex(ctx, out.data(), &len), "EVP_DigestFinal_ex failed");
  LC_CHECK(len == out.size(), "SHA-256 digest is not 32 bytes");
  return out;
}

}  // namespace

BlockHash HashBlock(const BlockHash& parent, std::span<const uint32_t> block_tokens,
                    std::span<const uint8_t> extras) {
  MdCtx ctx = NewCtx();
  return HashWith(ctx.get(), parent, block_tokens, extras);
}

absl::StatusOr<std::vector<BlockHash>> ChainHashes(std::span<const uint32_t> tokens,
                                                   int64_t block_tokens,
                                                   std::span<const uint8_t> extras) {
  if (block_tokens < 1 || block_tokens > kMaxBlockTokens) {
    return absl::InvalidArgumentError(absl::StrCat("block_tokens must be in [1, ", kMaxBlockTokens,
                                                   "] (got ", block_tokens, ")"));
  }
  if (extras.size() > kMaxExtrasBytes) {
    return absl::InvalidArgumentError(absl::StrCat("extras must be at most ", kMaxExtrasBytes,
                                                   " bytes (got ", extras.size(), ")"));
  }
  const size_t blocks = tokens.size() / static_cast<size_t>(block_tokens);
  if (blocks > static_cast<size_t>(kMaxChainBlocks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("chain of ", blocks, " blocks exceeds the maximum of ", kMaxChainBlocks));
  }
  std::vector<BlockHash> chain;
  chain.reserve(blocks);
  MdCtx ctx = NewCtx();
  BlockHash parent = kRootParentHash;
  for (size_t i = 0; i < blocks; ++i) {
    parent = HashWith(ctx.get(), parent, tokens.subspan(i * block_tokens, block_tokens), extras);
    chain.push_back(parent);
  }
  return chain;
}

std::string HashToHex(const BlockHash& hash) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(2 * hash.size(), '0');
  for (size_t i = 0; i < hash.size(); ++i) {
    s[2 * i] = kHex[hash[i] >> 4];
    s[2 * i + 1] = kHex[hash[i] & 15];
  }
  return s;
}

}  // namespace leapcache::base
