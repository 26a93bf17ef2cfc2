// The engine's speculative-decoding side: owns the drafter (a draft model or n-gram lookup), the
// adaptive policy and the target's step-cost model; before each step it attaches drafts to the
// running requests that are ready to decode, after each step it records what was accepted.
// Verification itself is spec/verify.h, run by the engine on the target's logits rows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_config.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"
#include "spec/drafter.h"
#include "spec/spec_config.h"
#include "spec/spec_policy.h"
#include "spec/step_cost.h"

namespace kestrel {

// Totals over the engine's life (vLLM's spec_decode_* counters).
struct SpecStats {
  int64_t num_drafts = 0;           // verifications with at least one draft
  int64_t num_draft_tokens = 0;     // drafts verified
  int64_t num_accepted_tokens = 0;  // of which accepted
  // Tokens the drafter computed before drafting, beyond each round's usual two (a draft model
  // catching up on a prompt it had not seen, or on what was generated while it did not draft).
  int64_t num_catch_up_tokens = 0;
  std::vector<int64_t> accepted_per_position;  // [K] drafts accepted at position i of their run
  // Mean tokens a verification produced (accepted + 1), vLLM's mean acceptance length.
  double mean_acceptance_length() const {
    return num_drafts > 0 ? 1.0 + double(num_accepted_tokens) / double(num_drafts) : 0.0;
  }
};

class Speculator {
 public:
  // `target_kv` and `target_runner` are the engine's (for the start-up cost measurement);
  // `target_tokens` the target cache's capacity (the draft's cache holds as many); `stop_tokens`
  // the requests' stop tokens (a draft head over part of the vocabulary keeps them).
  Speculator(const SpecConfig& config, const Model& target, const EngineConfig& engine_config,
             ModelRunner& target_runner, KVCacheManager& target_kv, int64_t target_tokens,
             std::span<const TokenId> stop_tokens = {});
  ~Speculator();

  // Sets draft_tokens on every running request that is ready to decode and speculates (the rest
  // get none). `speculating(id)` is the request's sampler, or nullptr if it does not speculate.
  void attach_drafts(const Scheduler& scheduler, const std::function<Sampler*(RequestId)>& speculating);
  // The draft distributions of the request's current drafts (empty: one-hot drafts).
  std::span<const TokenDistribution> draft_dists(RequestId id) const;
  // A step ran `num_tokens` tokens in `seconds` (keeps the cost model current).
  void observe_step(int64_t num_tokens, double seconds) { target_cost_.observe(num_tokens, seconds); }
  // A verification of `drafted` drafts accepted `accepted`.
  void record(RequestId id, int drafted, int accepted);
  void release(RequestId id);

  const SpecStats& stats() const { return stats_; }
  const SpecConfig& config() const { return config_; }
  const StepCostModel& target_cost() const { return target_cost_; }
  const Drafter& drafter() const { return *drafter_; }

 private:
  SpecConfig config_;
  std::unique_ptr<Drafter> drafter_;
  SpecPolicy policy_;
  StepCostModel target_cost_;
  SpecStats stats_;
  std::unordered_map<RequestId, std::vector<TokenDistribution>> dists_;
};

// Splits a KV budget between target and draft in proportion to their bytes per token (so both
// hold the same number of tokens): the target's share of `config`, or config unchanged without
// a draft model or with an explicit block count.
EngineConfig target_share_of_kv_budget(const Model& target, const EngineConfig& config);

}  // namespace kestrel
