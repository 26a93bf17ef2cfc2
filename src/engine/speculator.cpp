#include "engine/speculator.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "engine/kv_capacity.h"
#include "spec/draft_model_drafter.h"
#include "spec/ngram_drafter.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

// Steps timed at start-up: up to this many tokens (larger steps are extrapolated and then
// measured as they run).
constexpr int64_t kCalibrationTokens = 64;

}  // namespace

EngineConfig target_share_of_kv_budget(const Model& target, const EngineConfig& config) {
  EngineConfig out = config;
  if (config.spec.method != SpecMethod::DraftModel || config.spec.draft_model == nullptr || config.num_kv_blocks > 0) {
    return out;
  }
  const double t = double(kv_bytes_per_token(target, config));
  const double d = double(kv_bytes_per_token(*config.spec.draft_model, config));
  const double share = t / (t + d);
  if (config.kv_memory_bytes > 0) {
    out.kv_memory_bytes = int64_t(double(config.kv_memory_bytes) * share);
  } else {
    out.kv_memory_fraction = config.kv_memory_fraction * share;
  }
  return out;
}

Speculator::Speculator(const SpecConfig& config, const Model& target, const EngineConfig& engine_config,
                       ModelRunner& target_runner, KVCacheManager& target_kv, int64_t target_tokens,
                       std::span<const TokenId> stop_tokens)
    : config_(config), policy_(config.num_spec_tokens, config.adaptive) {
  if (config.num_spec_tokens < 0) fail("--spec-tokens must be >= 0, got {}", config.num_spec_tokens);
  if (config.method == SpecMethod::Ngram) {
    drafter_ = std::make_unique<NgramDrafter>(config.ngram_min, config.ngram_max);
  } else if (config.method == SpecMethod::DraftModel) {
    if (config.draft_model == nullptr) fail("speculative decoding with a draft model needs --draft-model");
    const Model& draft = *config.draft_model;
    check_draft_model(target, draft);  // the vocabulary check (the caller reports the size warning)
    // The draft's cache holds as many tokens as the target's.
    EngineConfig dc = engine_config;
    dc.num_kv_blocks = (target_tokens + dc.block_size - 1) / dc.block_size;
    const RunnerConfig rc = make_runner_config(draft, dc);
    std::vector<TokenId> head_tokens;
    if (config.draft_head_is_subset(draft.config().n_vocab)) {
      head_tokens = draft_head_tokens(tokens_by_frequency(Tokenizer::vocab_from_gguf(draft.file())),
                                      config.draft_vocab, stop_tokens);
    }
    auto drafter = std::make_unique<DraftModelDrafter>(draft, rc, make_kv_groups(draft, rc, dc), dc.block_size,
                                                       &target_runner.backend(), config.sample_drafts,
                                                       std::move(head_tokens));
    if (config.adaptive) drafter->calibrate(kCalibrationTokens);
    drafter_ = std::move(drafter);
  } else {
    fail("internal: a speculator without a method");
  }
  if (config.adaptive) target_cost_.calibrate(target_runner, target_kv, kCalibrationTokens);
  stats_.accepted_per_position.assign(size_t(std::max(0, config.num_spec_tokens)), 0);
}

Speculator::~Speculator() = default;

void Speculator::attach_drafts(const Scheduler& scheduler, const std::function<Sampler*(RequestId)>& speculating) {
  std::vector<Request*> ready;
  std::vector<Sampler*> samplers;
  std::vector<SpecCandidate> candidates;
  int64_t other_tokens = 0;
  for (Request* r : scheduler.running()) {
    r->draft_tokens.clear();
    const int64_t pending = r->num_tokens() - r->num_computed_tokens;
    const int cap = int(std::min<int64_t>(config_.num_spec_tokens, scheduler.draft_limit(*r)));
    Sampler* sampler = pending == 1 && cap > 0 ? speculating(r->id) : nullptr;
    if (sampler != nullptr) {
      ready.push_back(r);
      samplers.push_back(sampler);
      candidates.push_back({r->id, cap, drafter_->catch_up_tokens(r->id, r->tokens),
                            r->max_tokens - r->num_output_tokens()});
    } else {
      other_tokens += pending;
    }
  }
  other_tokens = std::min(other_tokens, scheduler.config().max_num_batched_tokens);
  if (ready.empty()) return;

  std::vector<DraftQuery> queries(ready.size());
  std::vector<DraftProposal> proposals(ready.size());
  auto query = [&](size_t i, int max_drafts) {
    queries[i] = {ready[i]->id, ready[i]->tokens, max_drafts, samplers[i]};
  };
  std::vector<int> drafts;
  if (drafter_->cost_seconds(1, 1) == 0.0) {
    // A free drafter proposes first; the policy then keeps what pays.
    for (size_t i = 0; i < ready.size(); ++i) query(i, candidates[i].cap);
    drafter_->propose(queries, proposals);
    for (size_t i = 0; i < ready.size(); ++i) candidates[i].cap = int(proposals[i].tokens.size());
    drafts = policy_.choose(candidates, other_tokens, target_cost_, *drafter_);
  } else {
    drafts = policy_.choose(candidates, other_tokens, target_cost_, *drafter_);
    for (size_t i = 0; i < ready.size(); ++i) query(i, drafts[i]);
    drafter_->propose(queries, proposals);
  }
  for (size_t i = 0; i < ready.size(); ++i) {
    const RequestId id = ready[i]->id;
    if (drafts[i] > 0) stats_.num_catch_up_tokens += candidates[i].catch_up;
    DraftProposal& p = proposals[i];
    const size_t n = std::min(p.tokens.size(), size_t(std::max(0, drafts[i])));
    p.tokens.resize(n);
    if (!p.dists.empty()) p.dists.resize(n);
    ready[i]->draft_tokens = p.tokens;
    if (n == 0) {
      policy_.idle(id);
      dists_.erase(id);
    } else {
      dists_[id] = std::move(p.dists);
    }
  }
}

std::span<const TokenDistribution> Speculator::draft_dists(RequestId id) const {
  const auto it = dists_.find(id);
  return it == dists_.end() ? std::span<const TokenDistribution>() : std::span<const TokenDistribution>(it->second);
}

void Speculator::record(RequestId id, int drafted, int accepted) {
  if (drafted <= 0) return;
  policy_.record(id, drafted, accepted);
  ++stats_.num_drafts;
  stats_.num_draft_tokens += drafted;
  stats_.num_accepted_tokens += accepted;
  for (int i = 0; i < accepted && i < int(stats_.accepted_per_position.size()); ++i) ++stats_.accepted_per_position[size_t(i)];
}

void Speculator::release(RequestId id) {
  drafter_->release(id);
  policy_.release(id);
  dists_.erase(id);
}

}  // namespace kestrel
