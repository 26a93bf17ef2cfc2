#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace kestrel {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

void Sampler::apply_penalties(std::span<float> logits, std::span<const TokenId> history) const {
  const SamplingParams& p = params_;
  if (p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) {
    return;
  }
  size_t window = history.size();
  if (p.penalty_last_n >= 0) window = std::min(window, size_t(p.penalty_last_n));
  std::unordered_map<TokenId, int> counts;
  for (size_t i = history.size() - window; i < history.size(); ++i) ++counts[history[i]];
  for (const auto& [token, count] : counts) {
    if (token < 0 || size_t(token) >= logits.size()) continue;
    float& logit = logits[size_t(token)];
    if (p.repetition_penalty != 1.0f) {
      logit = logit > 0.0f ? logit / p.repetition_penalty : logit * p.repetition_penalty;
    }
    logit -= float(count) * p.frequency_penalty + (count > 0 ? p.presence_penalty : 0.0f);
  }
}

void compute_logprobs(std::span<const float> logits, TokenId token, int top_n, SampleResult* result) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l - max_logit));
  const float log_sum = max_logit + float(std::log(sum));
  result->logprob = logits[size_t(token)] - log_sum;
  result->top_logprobs.clear();
  if (top_n <= 0) return;
  std::vector<TokenId> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = TokenId(i);
  const size_t n = std::min(size_t(top_n), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(n), ids.end(), [&](TokenId a, TokenId b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < n; ++i) result->top_logprobs.push_back({ids[i], logits[size_t(ids[i])] - log_sum});
}

SampleResult Sampler::sample(std::span<float> logits, std::span<const TokenId> history) {
  SampleResult result;
  // Logprobs describe the model's distribution, before penalties and truncation (as OpenAI does).
  const bool want_logprobs = params_.top_logprobs >= 0;
  std::vector<float> raw;
  if (want_logprobs) raw.assign(logits.begin(), logits.end());

  apply_penalties(logits, history);
  // A NaN logit (a broken model or kernel) must never win or poison the sort.
  for (float& l : logits) {
    if (std::isnan(l)) l = -std::numeric_limits<float>::infinity();
  }

  const float best = *std::max_element(logits.begin(), logits.end());
  if (params_.greedy() || best == -std::numeric_limits<float>::infinity()) {
    result.token = TokenId(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    candidates_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {TokenId(i), logits[i] / params_.temperature};
    auto by_logit = [](const TokenLogprob& a, const TokenLogprob& b) {
      return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
    };
    size_t keep = candidates_.size();
    if (params_.top_k > 0 && size_t(params_.top_k) < keep) {
      keep = size_t(params_.top_k);
      std::partial_sort(candidates_.begin(), candidates_.begin() + std::ptrdiff_t(keep),
                        candidates_.end(), by_logit);
    } else {
      std::sort(candidates_.begin(), candidates_.end(), by_logit);
    }
    // Softmax over the kept candidates (sorted, best first); `logprob` now holds probabilities.
    const float max_logit = candidates_[0].logprob;
    double total = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      candidates_[i].logprob = std::exp(candidates_[i].logprob - max_logit);
      total += candidates_[i].logprob;
    }
    for (size_t i = 0; i < keep; ++i) candidates_[i].logprob = float(candidates_[i].logprob / total);
    if (params_.top_p < 1.0f) {
      double cumulative = 0.0;
      for (size_t i = 0; i < keep; ++i) {
        cumulative += candidates_[i].logprob;
        if (cumulative >= params_.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    if (params_.min_p > 0.0f) {
      const float threshold = params_.min_p * candidates_[0].logprob;
      size_t i = 1;
      while (i < keep && candidates_[i].logprob >= threshold) ++i;
      keep = i;
    }
    double kept_total = 0.0;
    for (size_t i = 0; i < keep; ++i) kept_total += candidates_[i].logprob;
    const double draw = std::uniform_real_distribution<double>(0.0, kept_total)(rng_);
    double cumulative = 0.0;
    result.token = candidates_[keep - 1].token;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += candidates_[i].logprob;
      if (draw < cumulative) {
        result.token = candidates_[i].token;
        break;
      }
    }
  }
  if (want_logprobs) compute_logprobs(raw, result.token, params_.top_logprobs, &result);
  return result;
}

}  // namespace kestrel
