// The processor chain: what turns a row of raw logits into the distribution a token is drawn
// from. Processors edit logits in place, in order (penalties, the NaN guard, later a grammar's
// token mask), then temperature and truncation (top-k, top-p, min-p) turn them into
// probabilities. The draw is separate (sampler.h), so speculative decoding applies the same chain
// to the target's rows and the draft's rows and compares the two distributions.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sample/sampling_params.h"

namespace kestrel {

using TokenId = int32_t;

// One step of the chain over logits [n_vocab]. `history` is the sequence so far (prompt +
// generated, and under speculation the drafts accepted before this row).
class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  virtual void apply(std::span<float> logits, std::span<const TokenId> history) = 0;
};

// The probabilities a token is drawn from. Greedy: one-hot at `token` (no dense vector is built);
// otherwise `probs` [n_vocab] sums to 1 with truncated tokens at exactly 0.
struct TokenDistribution {
  TokenId token = -1;          // >= 0: one-hot at this token
  std::vector<float> probs;    // used when token < 0

  bool one_hot() const { return token >= 0; }
  float p(TokenId t) const { return one_hot() ? (t == token ? 1.0f : 0.0f) : probs[size_t(t)]; }
  void set_one_hot(TokenId t) { token = t; }
};

// Repetition, frequency and presence penalties over the last penalty_last_n tokens of history
// (the chain adds it only when some penalty is on).
class PenaltyProcessor final : public LogitsProcessor {
 public:
  explicit PenaltyProcessor(const SamplingParams& params) : params_(params) {}
  void apply(std::span<float> logits, std::span<const TokenId> history) override;

 private:
  SamplingParams params_;
};

// A NaN logit (a broken model or kernel) must never win or poison the truncation.
class NanGuardProcessor final : public LogitsProcessor {
 public:
  void apply(std::span<float> logits, std::span<const TokenId> history) override;
};

class ProcessorChain {
 public:
  // The chain for `params`: penalties (if any), the NaN guard, then temperature and truncation.
  explicit ProcessorChain(const SamplingParams& params);
  // Appends a processor that runs after the built-in logits processors (e.g. a token mask).
  void add(std::unique_ptr<LogitsProcessor> processor) { processors_.push_back(std::move(processor)); }

  // Runs every processor on `logits` (modified in place) and fills `out`. Greedy, or every logit
  // -inf: one-hot at the argmax (lowest id on ties). Otherwise softmax(logits / temperature)
  // restricted to top-k, then the top-p nucleus, then tokens with p >= min_p * p_max, and
  // renormalised. Only top-k and top-p sort, and only the candidates they keep.
  void process(std::span<float> logits, std::span<const TokenId> history, TokenDistribution* out);
  // The most likely token of process()'s distribution, without building it: the logits
  // processors run, then the argmax (lowest id on ties); temperature and truncation keep it.
  TokenId most_likely(std::span<float> logits, std::span<const TokenId> history);


 private:
  void run_processors(std::span<float> logits, std::span<const TokenId> history);
  void truncate(std::span<const float> logits, float max_logit, TokenDistribution* out);

  SamplingParams params_;
  std::vector<std::unique_ptr<LogitsProcessor>> processors_;
  std::vector<std::pair<float, TokenId>> scratch_;  // top-k / top-p candidates
};

}  // namespace kestrel
