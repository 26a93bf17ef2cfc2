// Drafters: cheap proposers of the tokens a request will probably generate next, which the target
// model then verifies in one pass (spec/verify.h). One interface for a separate draft model
// (draft_model_drafter.h) and n-gram prompt lookup (ngram_drafter.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "sample/logits_processors.h"
#include "sample/sampler.h"

namespace kestrel {

// One request asking for drafts.
struct DraftQuery {
  RequestId id = 0;
  std::span<const TokenId> tokens;  // prompt + generated so far (the last one not yet computed)
  int max_drafts = 0;               // propose at most this many
  Sampler* sampler = nullptr;       // the request's sampler (its processors and seed)
};

struct DraftProposal {
  std::vector<TokenId> tokens;
  // The draft distributions q_i the tokens were drawn from (rejection sampling); empty when each
  // token is a one-hot proposal (n-gram lookup, greedy drafts).
  std::vector<TokenDistribution> dists;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Fills out[i] for queries[i]; a proposal may be shorter than asked (even empty).
  virtual void propose(std::span<const DraftQuery> queries, std::span<DraftProposal> out) = 0;
  // The request finished: drop whatever the drafter keeps for it.
  virtual void release(RequestId id) = 0;
  // Seconds one drafting round of `num_drafts` tokens for each of `num_requests` requests costs
  // (the cost model's draft term; 0 for drafters that run no model).
  virtual double cost_seconds(int64_t num_requests, int num_drafts) const = 0;
  // Tokens the drafter must compute for a request (its tokens so far: `tokens`) before its first
  // draft beyond what cost_seconds counts (a draft model that has not seen the prompt, or the
  // tokens generated while it did not draft), and what computing them costs. 0 for drafters that
  // run no model.
  virtual int64_t catch_up_tokens(RequestId /*id*/, std::span<const TokenId> /*tokens*/) const { return 0; }
  virtual double catch_up_seconds(int64_t /*tokens*/) const { return 0.0; }
  virtual const char* name() const = 0;
};

}  // namespace kestrel
