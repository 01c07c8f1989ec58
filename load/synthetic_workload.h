// Synthetic prefix-sharing workloads: the shapes of reuse that production traffic shows, each a
// seeded, deterministic list of requests with Poisson arrivals and Zipf-popular prefixes.
//
//   system-prompt  a few system prompts (2-16 blocks) shared by many one-shot requests, each
//                  adding 1-4 blocks of its own.
//   chat           multi-turn conversations: a turn's prompt is the conversation so far (its
//                  earlier prompts and answers) plus the new user message, so turn n+1 extends
//                  turn n's prefix; Zipf picks which conversation speaks next.
//   agent          agent loops: a long tool/instruction prompt shared by all sessions of one
//                  agent type, then step after step of tool outputs (1-6 blocks each) appended
//                  to the session's growing context, short outputs (tool calls).
//   few-shot       few-shot templates (8-24 blocks of examples) shared by requests that differ
//                  only in a short final question.
//   mixed          each request picks one of the four above, uniformly.
// Every prompt ends in a partial block of its own (as real prompts do), and every answer's
// tokens become part of the conversation's later blocks. Randomness comes from 64-bit draws of
// one std::mt19937_64 (bit-identical on every standard library), so a seed fixes the workload.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "load/workload.h"

namespace leapcache::load {

enum class Scenario { kSystemPrompt, kChat, kAgent, kFewShot, kMixed };

// "system-prompt", "chat", "agent", "few-shot", "mixed" and back.
const char* ScenarioName(Scenario s);
absl::StatusOr<Scenario> ParseScenario(const std::string& name);

struct SyntheticOptions {
  Scenario scenario = Scenario::kMixed;
  int64_t requests = 1000;
  double rate_per_s = 10;  // Poisson arrival rate
  uint64_t seed = 1;
  double zipf_s = 1.0;       // popularity skew of prompts, templates, conversations, sessions
  int64_t population = 64;   // distinct system prompts / templates / conversations / sessions
  int64_t block_tokens = 512;
  int64_t max_context_blocks = 96;  // a conversation or agent session restarts beyond this
};

// INVALID_ARGUMENT naming the bad option.
absl::StatusOr<std::vector<WorkloadRequest>> GenerateSyntheticWorkload(
    const SyntheticOptions& options);

}  // namespace leapcache::load
