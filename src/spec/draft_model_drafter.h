// Drafting with a separate, smaller model that shares the target's vocabulary (Qwen2.5-Coder 0.5B
// for 1.5B). The draft keeps its own paged K/V (its own block pool and tables, sized for as many
// tokens as the target's cache) and computes on the target's backend and thread pool. Each round
// it first catches up on the tokens the target accepted since its last proposal (dropping the K/V
// of its rejected drafts: the common prefix of what it fed and the request's tokens survives),
// then runs k one-token steps for every drafting request at once. When it is far behind (drafting
// was off for a while) it restarts from the request's last kCatchUpWindow tokens instead.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "spec/draft_head.h"
#include "spec/drafter.h"
#include "spec/step_cost.h"

namespace kestrel {

// A clear error when the draft cannot serve the target: vocabularies of different sizes (both
// named). Returns a warning ("" if none) when the draft is not smaller than the target.
std::string check_draft_model(const Model& target, const Model& draft);

class DraftModelDrafter final : public Drafter {
 public:
  // `groups` and `runner` describe the draft's KV cache (kv_capacity.h sizes them).
  // sample_drafts: requests that sample draw their drafts from the draft's processed distribution
  // q (verified by rejection sampling); otherwise every draft is the draft's most likely token
  // (one-hot q: the output is then token for token what plain decoding gives).
  // head_tokens: the draft's logits cover only these token ids and every token it is fed later
  // (DraftHead; empty: the whole vocabulary); its drafts are then always among them.
  DraftModelDrafter(const Model& draft, const RunnerConfig& runner, std::vector<KVCacheGroupSpec> groups,
                    int block_size, Backend* shared_backend, bool sample_drafts,
                    std::vector<TokenId> head_tokens = {});

  void propose(std::span<const DraftQuery> queries, std::span<DraftProposal> out) override;
  void release(RequestId id) override;
  double cost_seconds(int64_t num_requests, int num_drafts) const override;
  int64_t catch_up_tokens(RequestId id, std::span<const TokenId> tokens) const override;
  double catch_up_seconds(int64_t tokens) const override;
  const char* name() const override { return "draft"; }

  // Measures the draft's step costs (once, at start-up).
  void calibrate(int64_t max_tokens) { cost_.calibrate(runner_, kv_, max_tokens); }
  const KVCacheManager& kv() const { return kv_; }

 private:
  struct Sequence {
    int64_t base = 0;          // the request's token at the draft's position 0
    std::vector<TokenId> fed;  // tokens base.. whose K/V are in the draft's cache, positions 0..
  };
  // The most tokens a round catches up on; further behind, the draft restarts from this many.
  static constexpr int64_t kCatchUpWindow = 128;
  // Tokens a round computes per request before its first draft when the draft is in step (the
  // last step's accepted tokens and the target's bonus token): cost_seconds counts these.
  static constexpr int64_t kRoundCatchUp = 2;
  // Where the draft's sequence for a request with `tokens` so far starts this round: the
  // request's token at draft position 0 (base) and the draft positions whose K/V survive
  // (common: the common prefix of what was fed and the request's tokens, never the last token,
  // whose logits give the first draft); restart: the draft is further behind than
  // kCatchUpWindow and starts again from the last kCatchUpWindow tokens.
  struct Resume {
    int64_t base = 0;
    int64_t common = 0;
    bool restart = false;
  };
  Resume resume(const Sequence* seq, std::span<const TokenId> tokens) const;

  const Model& model_;
  std::unique_ptr<DraftHead> head_;  // null: the model's whole head
  KVCacheManager kv_;
  ModelRunner runner_;
  bool sample_drafts_;
  std::vector<float> full_row_;  // [n_vocab]: a subset head's logits row spread over the vocabulary
  std::unordered_map<RequestId, Sequence> sequences_;
  StepCostModel cost_;
};

}  // namespace kestrel
