// Prints the C++ client's block-hash chain (leapcache::client::ChainHashes) of the token ids on
// standard input (decimal, whitespace-separated), one hash per line in hex: the reference the
// Python package's chain_hashes is compared with.
//
//   leapcache_chain_hashes_tool BLOCK_TOKENS [SALT_HEX] < tokens.txt
//
// Exit status: 0, 1 if ChainHashes refuses the input (its message on stderr), 2 on bad usage.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "leapcache/client.h"

int main(int argc, char** argv) {
  int64_t block_tokens = 0;
  if (argc < 2 || argc > 3 || !absl::SimpleAtoi(argv[1], &block_tokens)) {
    std::fprintf(stderr, "usage: %s BLOCK_TOKENS [SALT_HEX] < tokens\n", argv[0]);
    return 2;
  }
  const std::string salt = argc == 3 ? absl::HexStringToBytes(argv[2]) : std::string();
  std::vector<uint32_t> tokens;
  for (uint64_t t; std::cin >> t;) tokens.push_back(static_cast<uint32_t>(t));
  absl::StatusOr<std::vector<leapcache::client::BlockHash>> chain =
      leapcache::client::ChainHashes(
          tokens, block_tokens,
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(salt.data()), salt.size()));
  if (!chain.ok()) {
    std::fprintf(stderr, "%s\n", std::string(chain.status().message()).c_str());
    return 1;
  }
  for (const leapcache::client::BlockHash& h : *chain) {
    std::printf("%s\n", leapcache::client::HashToHex(h).c_str());
  }
  return 0;
}
