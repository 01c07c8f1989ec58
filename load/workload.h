// One request of a load-test workload, whatever produced it (a trace or a generator).
//
// The representation follows the Mooncake trace: a request's prompt is a sequence of blocks of
// `block_tokens` tokens, each named by an integer id, the last block possibly partial. Equal ids
// at the same position of two requests mean the same prompt content up to that block, so the
// ids are a prefix tree; the load tester turns them into SHA-256 block-hash chains
// (block_chain.h). Only full blocks carry checkpoints.
#pragma once

#include <cstdint>
#include <vector>

namespace leapcache::load {

struct WorkloadRequest {
  double arrival_s = 0;       // arrival time from the workload's start, seconds
  int64_t input_tokens = 0;   // prompt length
  int64_t output_tokens = 0;  // tokens decoded
  // Ids of the prompt's blocks, ceil(input_tokens / block_tokens) of them.
  std::vector<uint64_t> block_ids;
};

// The number of full blocks of a request's prompt: the blocks that can hold a checkpoint.
inline int64_t FullBlocks(const WorkloadRequest& r, int64_t block_tokens) {
  const int64_t full = r.input_tokens / block_tokens;
  return full < static_cast<int64_t>(r.block_ids.size()) ? full
                                                         : static_cast<int64_t>(r.block_ids.size());
}

}  // namespace leapcache::load
