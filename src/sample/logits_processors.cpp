#include "sample/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace kestrel {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Better candidate first: higher value, then lower id (deterministic on ties).
bool better(const std::pair<float, TokenId>& a, const std::pair<float, TokenId>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

void normalise(std::vector<float>& probs) {
  double total = 0.0;
  for (float p : probs) total += p;
  const float scale = float(1.0 / total);
  for (float& p : probs) p *= scale;
}

}  // namespace

void PenaltyProcessor::apply(std::span<float> logits, std::span<const TokenId> history) {
  const SamplingParams& p = params_;
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

void NanGuardProcessor::apply(std::span<float> logits, std::span<const TokenId>) {
  for (float& l : logits) {
    if (std::isnan(l)) l = kNegInf;
  }
}

ProcessorChain::ProcessorChain(const SamplingParams& params) : params_(params) {
  if (params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    processors_.push_back(std::make_unique<PenaltyProcessor>(params));
  }
  processors_.push_back(std::make_unique<NanGuardProcessor>());
}

void ProcessorChain::run_processors(std::span<float> logits, std::span<const TokenId> history) {
  for (const auto& processor : processors_) processor->apply(logits, history);
}

TokenId ProcessorChain::most_likely(std::span<float> logits, std::span<const TokenId> history) {
  run_processors(logits, history);
  return TokenId(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

void ProcessorChain::process(std::span<float> logits, std::span<const TokenId> history, TokenDistribution* out) {
  run_processors(logits, history);
  const auto best = std::max_element(logits.begin(), logits.end());
  out->token = -1;
  if (params_.greedy() || *best == kNegInf) {
    out->set_one_hot(TokenId(best - logits.begin()));
    return;
  }
  truncate(logits, *best, out);
}

void ProcessorChain::truncate(std::span<const float> logits, float max_logit, TokenDistribution* out) {
  const size_t n = logits.size();
  const float inv_t = 1.0f / params_.temperature;
  std::vector<float>& probs = out->probs;
  probs.assign(n, 0.0f);
  // Top-k: the k best logits (O(n) selection), the rest stay at 0.
  const bool top_k = params_.top_k > 0 && size_t(params_.top_k) < n;
  if (top_k) {
    scratch_.resize(n);
    for (size_t i = 0; i < n; ++i) scratch_[i] = {logits[i], TokenId(i)};
    const auto kth = scratch_.begin() + params_.top_k;
    std::nth_element(scratch_.begin(), kth - 1, scratch_.end(), better);
    for (auto it = scratch_.begin(); it != kth; ++it) {
      probs[size_t(it->second)] = std::exp((it->first - max_logit) * inv_t);
    }
    scratch_.resize(size_t(params_.top_k));
  } else {
    for (size_t i = 0; i < n; ++i) probs[i] = std::exp((logits[i] - max_logit) * inv_t);
  }
  normalise(probs);

  // Top-p: the smallest set of most likely tokens whose mass reaches top_p. Only the head of the
  // order is needed, so sort the best m candidates and widen m until the mass is reached.
  if (params_.top_p < 1.0f) {
    if (!top_k) {
      scratch_.clear();
      for (size_t i = 0; i < n; ++i) {
        if (probs[i] > 0.0f) scratch_.push_back({probs[i], TokenId(i)});
      }
    } else {
      for (auto& c : scratch_) c.first = probs[size_t(c.second)];
    }
    size_t m = std::min<size_t>(64, scratch_.size());
    size_t keep = scratch_.size();
    for (;;) {
      std::partial_sort(scratch_.begin(), scratch_.begin() + std::ptrdiff_t(m), scratch_.end(), better);
      double cumulative = 0.0;
      size_t i = 0;
      for (; i < m; ++i) {
        cumulative += scratch_[i].first;
        if (cumulative >= params_.top_p) break;
      }
      if (i < m) {
        keep = i + 1;
        break;
      }
      if (m == scratch_.size()) break;  // rounding: the whole set is the nucleus
      m = std::min(scratch_.size(), m * 8);
    }
    for (size_t i = keep; i < scratch_.size(); ++i) probs[size_t(scratch_[i].second)] = 0.0f;
  }
  // Min-p: tokens at least min_p times as likely as the best one (a ratio: no sorting).
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * *std::max_element(probs.begin(), probs.end());
    for (float& p : probs) {
      if (p < threshold) p = 0.0f;
    }
  }
  normalise(probs);
}

}  // namespace kestrel
