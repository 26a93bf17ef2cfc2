#include "sample/sampler.h"

#include <algorithm>
#include <vector>

#include "sample/log_softmax.h"

namespace kestrel {

Sampler::Sampler(const SamplingParams& params) : params_(params), chain_(params) {}

namespace {

// SplitMix64's finaliser: a bijective mix of 64 bits.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

double Sampler::uniform(int64_t position, int stream) const {
  const uint64_t h = mix64(mix64(params_.seed + 0x9e3779b97f4a7c15ULL) + uint64_t(position) * 0xd1b54a32d192ed03ULL +
                           uint64_t(stream) * 0x8cb92ba72f3d8dd7ULL);
  // Strictly inside (0, 1): a token of probability 0 is never drawn, one of probability 1 always.
  return (double(h >> 11) + 0.5) * 0x1.0p-53;
}

TokenId draw_token(const TokenDistribution& dist, double u) {
  if (dist.one_hot()) return dist.token;
  double cumulative = 0.0;
  TokenId last = -1;
  for (size_t i = 0; i < dist.probs.size(); ++i) {
    if (dist.probs[i] <= 0.0f) continue;
    cumulative += dist.probs[i];
    last = TokenId(i);
    if (u < cumulative) return last;
  }
  return last;  // u within rounding of 1
}

void compute_logprobs(std::span<const float> logits, TokenId token, int top_n, SampleResult* result) {
  const LogSoftmax ls(logits);
  result->logprob = float(ls.log_p(logits[size_t(token)]));
  result->top_logprobs.clear();
  if (top_n <= 0) return;
  std::vector<TokenId> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = TokenId(i);
  const size_t n = std::min(size_t(top_n), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(n), ids.end(), [&](TokenId a, TokenId b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < n; ++i) result->top_logprobs.push_back({ids[i], float(ls.log_p(logits[size_t(ids[i])]))});
}

void Sampler::fill_logprobs(std::span<const float> raw_logits, TokenId token, SampleResult* result) const {
  compute_logprobs(raw_logits, token, params_.top_logprobs, result);
}

SampleResult Sampler::sample(std::span<float> logits, std::span<const TokenId> history) {
  SampleResult result;
  // Logprobs describe the model's distribution, before penalties and truncation (as OpenAI does).
  std::vector<float> raw;
  if (wants_logprobs()) raw.assign(logits.begin(), logits.end());
  chain_.process(logits, history, &dist_);
  result.token = draw_token(dist_, uniform(int64_t(history.size())));
  if (wants_logprobs()) fill_logprobs(raw, result.token, &result);
  return result;
}

}  // namespace kestrel
