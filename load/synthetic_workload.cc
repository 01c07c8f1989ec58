#include "load/synthetic_workload.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "load/poisson_arrivals.h"
#include "load/zipf.h"
#include "base/status_macros.h"

namespace leapcache::load {

const char* ScenarioName(Scenario s) {
  switch (s) {
    case Scenario::kSystemPrompt: return "system-prompt";
    case Scenario::kChat: return "chat";
    case Scenario::kAgent: return "agent";
    case Scenario::kFewShot: return "few-shot";
    case Scenario::kMixed: return "mixed";
  }
  return "?";
}

absl::StatusOr<Scenario> ParseScenario(const std::string& name) {
  for (Scenario s : {Scenario::kSystemPrompt, Scenario::kChat, Scenario::kAgent,
                     Scenario::kFewShot, Scenario::kMixed}) {
    if (name == ScenarioName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "scenario must be system-prompt, chat, agent, few-shot or mixed (got \"", name, "\")"));
}

namespace {

constexpr int kChatSystemPrompts = 4;
constexpr int kAgentTypes = 4;

class Generator {
 public:
  Generator(const SyntheticOptions& o, ZipfSampler popularity)
      : o_(o), rng_(o.seed * 0x9E3779B97F4A7C15ull + 0x5851F42D4C957F2Dull),
        popularity_(std::move(popularity)) {
    for (int64_t i = 0; i < o_.population; ++i) {
      system_prompts_.push_back(Fresh(Uniform(2, 16)));
      templates_.push_back(Fresh(Uniform(8, 24)));
    }
    for (int i = 0; i < kChatSystemPrompts; ++i) chat_system_.push_back(Fresh(2));
    for (int i = 0; i < kAgentTypes; ++i) agent_prompts_.push_back(Fresh(Uniform(8, 16)));
    conversations_.resize(o_.population);
    sessions_.resize(o_.population);
  }

  WorkloadRequest Next() {
    Scenario s = o_.scenario;
    if (s == Scenario::kMixed) s = static_cast<Scenario>(Uniform(0, 3));
    switch (s) {
      case Scenario::kSystemPrompt: return OneShot(system_prompts_[Popular()], 1, 4, 32, 512);
      case Scenario::kFewShot: return OneShot(templates_[Popular()], 0, 1, 8, 128);
      case Scenario::kChat: return ChatTurn();
      case Scenario::kAgent: return AgentStep();
      case Scenario::kMixed: break;
    }
    return {};
  }

 private:
  int64_t Uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }
  std::vector<uint64_t> Fresh(int64_t n) {
    std::vector<uint64_t> ids(n);
    for (uint64_t& id : ids) id = next_id_++;
    return ids;
  }
  size_t Popular() { return static_cast<size_t>(popularity_.Sample(rng_)); }

  // `full` whole blocks and a partial tail of `tail` tokens (1 .. block_tokens - 1).
  WorkloadRequest Prompt(std::vector<uint64_t> full_ids, int64_t tail, int64_t output) {
    WorkloadRequest r;
    r.input_tokens = static_cast<int64_t>(full_ids.size()) * o_.block_tokens + tail;
    r.output_tokens = output;
    r.block_ids = std::move(full_ids);
    r.block_ids.push_back(next_id_++);  // the partial block is this prompt's own
    return r;
  }
  int64_t Tail() { return Uniform(1, o_.block_tokens - 1); }

  WorkloadRequest OneShot(const std::vector<uint64_t>& shared, int64_t lo, int64_t hi,
                          int64_t out_lo, int64_t out_hi) {
    std::vector<uint64_t> ids = shared;
    const std::vector<uint64_t> own = Fresh(Uniform(lo, hi));
    ids.insert(ids.end(), own.begin(), own.end());
    return Prompt(std::move(ids), Tail(), Uniform(out_lo, out_hi));
  }

  // A growing context: `start` when empty, then `append` fresh blocks and a tail per turn; the
  // tail and the answer become the context's next whole blocks.
  WorkloadRequest Extend(std::vector<uint64_t>& context, const std::vector<uint64_t>& start,
                         int64_t append, int64_t output) {
    if (context.empty() || static_cast<int64_t>(context.size()) + append > o_.max_context_blocks) {
      context = start;
    }
    const std::vector<uint64_t> own = Fresh(append);
    context.insert(context.end(), own.begin(), own.end());
    const int64_t tail = Tail();
    WorkloadRequest r = Prompt(context, tail, output);
    const std::vector<uint64_t> answer = Fresh((tail + output) / o_.block_tokens);
    context.insert(context.end(), answer.begin(), answer.end());
    return r;
  }

  WorkloadRequest ChatTurn() {
    const size_t c = Popular();
    const std::vector<uint64_t>& system = chat_system_[c % kChatSystemPrompts];
    return Extend(conversations_[c], system, Uniform(0, 2), Uniform(64, 768));
  }

  WorkloadRequest AgentStep() {
    const size_t s = Popular();
    return Extend(sessions_[s], agent_prompts_[s % kAgentTypes], Uniform(1, 6), Uniform(16, 128));
  }

  const SyntheticOptions o_;
  std::mt19937_64 rng_;
  ZipfSampler popularity_;
  uint64_t next_id_ = 1;
  std::vector<std::vector<uint64_t>> system_prompts_, templates_, chat_system_, agent_prompts_;
  std::vector<std::vector<uint64_t>> conversations_, sessions_;
};

}  // namespace

absl::StatusOr<std::vector<WorkloadRequest>> GenerateSyntheticWorkload(
    const SyntheticOptions& o) {
  if (o.requests < 1 || o.requests > 10'000'000) {
    return absl::InvalidArgumentError(absl::StrCat("requests must be in [1, 1e7] (got ", o.requests, ")"));
  }
  if (o.population < 1 || o.population > 1'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("population must be in [1, 1e6] (got ", o.population, ")"));
  }
  if (o.block_tokens < 2 || o.block_tokens > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_tokens must be in [2, 65536] (got ", o.block_tokens, ")"));
  }
  if (o.max_context_blocks < 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_context_blocks must be >= 32 (got ", o.max_context_blocks, ")"));
  }
  LC_ASSIGN_OR_RETURN(ZipfSampler popularity,
                      ZipfSampler::Create(static_cast<uint64_t>(o.population), o.zipf_s));
  LC_ASSIGN_OR_RETURN(PoissonArrivals arrivals, PoissonArrivals::Create(o.rate_per_s, o.seed));
  Generator gen(o, std::move(popularity));
  std::vector<WorkloadRequest> out;
  out.reserve(o.requests);
  for (int64_t i = 0; i < o.requests; ++i) {
    WorkloadRequest r = gen.Next();
    r.arrival_s = arrivals.Next();
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace leapcache::load
