// Turns one row of logits into a token: the processor chain (logits_processors.h: penalties,
// temperature, top-k / top-p / min-p) gives a distribution, then a draw from a seeded RNG (or the
// one-hot token when greedy). The draw's uniform number depends only on the seed and the token's
// position, which is what lets speculative decoding with one-hot drafts (spec/verify.h) produce
// exactly the tokens plain decoding would. Temperature comes first, as in Hugging Face and vLLM, so the
// truncation filters see the distribution that is sampled.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sample/logits_processors.h"
#include "sample/sampling_params.h"

namespace kestrel {

struct TokenLogprob {
  TokenId token;
  float logprob;
};

struct SampleResult {
  TokenId token = -1;
  float logprob = 0.0f;                   // log-probability of `token` under the model's raw logits
  std::vector<TokenLogprob> top_logprobs;  // the most likely tokens (if requested), best first
};

// A draw of one token from `dist` with `u` uniform in [0, 1): the first token (in id order) whose
// cumulative probability exceeds u; one-hot distributions ignore u.
TokenId draw_token(const TokenDistribution& dist, double u);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // `logits` is modified in place. `history` is the sequence so far (prompt + generated), of which
  // the last penalty_last_n tokens are penalised.
  SampleResult sample(std::span<float> logits, std::span<const TokenId> history);

  // The pieces sample() is made of, for speculative verification: the chain's distribution of a
  // row, a uniform draw from this request's RNG, and the logprobs of a chosen token.
  void distribution(std::span<float> logits, std::span<const TokenId> history, TokenDistribution* out) {
    chain_.process(logits, history, out);
  }
  // The request's uniform number in [0, 1) for the token at `position`, stream `stream`: a hash of
  // (seed, position, stream), so a seeded request draws the same numbers whatever the batch, the
  // step a token is produced in, or how many drafts were verified before it.
  double uniform(int64_t position, int stream = 0) const;
  // Logprobs of `token` (and the top ones if requested) under `raw_logits`, into `result`.
  void fill_logprobs(std::span<const float> raw_logits, TokenId token, SampleResult* result) const;
  bool wants_logprobs() const { return params_.top_logprobs >= 0; }

  const SamplingParams& params() const { return params_; }
  ProcessorChain& chain() { return chain_; }

 private:
  SamplingParams params_;
  ProcessorChain chain_;
  TokenDistribution dist_;  // scratch
};

// log-softmax of logits at `token` and, if top_n > 0, the top_n best tokens with their logprobs.
void compute_logprobs(std::span<const float> logits, TokenId token, int top_n, SampleResult* result);

}  // namespace kestrel
