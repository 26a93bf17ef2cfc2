// Turns one row of logits into a token: penalties, then temperature, then top-k / top-p / min-p
// truncation, then a draw from a seeded RNG (or argmax when greedy). Temperature comes first, as
// in Hugging Face and vLLM, so the truncation filters see the distribution that is sampled.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "sample/sampling_params.h"

namespace kestrel {

using TokenId = int32_t;

struct TokenLogprob {
  TokenId token;
  float logprob;
};

struct SampleResult {
  TokenId token = -1;
  float logprob = 0.0f;                   // log-probability of `token` under the model's raw logits
  std::vector<TokenLogprob> top_logprobs;  // the most likely tokens (if requested), best first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // `logits` is modified in place. `history` is the sequence so far (prompt + generated), of which
  // the last penalty_last_n tokens are penalised.
  SampleResult sample(std::span<float> logits, std::span<const TokenId> history);

  const SamplingParams& params() const { return params_; }

 private:
  void apply_penalties(std::span<float> logits, std::span<const TokenId> history) const;

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<TokenLogprob> candidates_;  // scratch
};

// log-softmax of logits at `token` and, if top_n > 0, the top_n best tokens with their logprobs.
void compute_logprobs(std::span<const float> logits, TokenId token, int top_n, SampleResult* result);

}  // namespace kestrel
