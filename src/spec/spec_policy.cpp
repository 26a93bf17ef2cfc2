#include "spec/spec_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>


namespace kestrel {

double expected_tokens(double alpha, int k) {
  double total = 0.0, term = 1.0;
  for (int i = 0; i <= k; ++i, term *= alpha) total += term;
  return total;
}

SpecPolicy::SpecPolicy(int max_drafts, bool adaptive) : max_drafts_(max_drafts), adaptive_(adaptive) {}

SpecPolicy::Stats& SpecPolicy::stats(RequestId id) {
  const auto it = stats_.find(id);
  if (it != stats_.end()) return it->second;
  // A new request starts from the engine-wide estimate, weighed as two trials.
  Stats s;
  const double alpha = global_.accepted / global_.tried;
  s.accepted = 2 * alpha;
  s.tried = 2.0;
  // ... and waits for its first probe as long as the last failed probe's request did (a draft that
  // has proved useless is not paid for again by every new request).
  s.probe_steps = global_.probe_steps;
  return stats_.emplace(id, s).first->second;
}

double SpecPolicy::acceptance(RequestId id) const {
  const auto it = stats_.find(id);
  const Stats& s = it == stats_.end() ? global_ : it->second;
  return std::clamp(s.accepted / s.tried, 0.0, 0.99);
}

void SpecPolicy::record(RequestId id, int drafted, int accepted) {
  if (drafted <= 0) return;
  Stats& s = stats(id);
  // Trials of a geometric model: every accepted draft, plus the rejected one if any.
  const double tried = accepted < drafted ? accepted + 1 : accepted;
  constexpr double kDecay = 0.7, kGlobalDecay = 0.95;
  s.accepted = kDecay * s.accepted + accepted;
  s.tried = kDecay * s.tried + tried;
  s.idle_steps = 0;
  // A probe that accepts nothing waits twice as long for the next; any acceptance resets the wait.
  if (accepted > 0) {
    s.probe_steps = kProbeSteps;
    global_.probe_steps = kProbeSteps;
  } else if (s.probing) {
    s.probe_steps = std::min(2 * s.probe_steps, kMaxProbeSteps);
    global_.probe_steps = s.probe_steps;
  }
  s.probing = false;
  global_.accepted = kGlobalDecay * global_.accepted + accepted;
  global_.tried = kGlobalDecay * global_.tried + tried;
}

void SpecPolicy::idle(RequestId id) {
  Stats& s = stats(id);
  constexpr double kDrift = 0.97;
  const double alpha = global_.accepted / global_.tried;
  s.accepted = kDrift * s.accepted + (1 - kDrift) * 2 * alpha;
  s.tried = kDrift * s.tried + (1 - kDrift) * 2.0;
  ++s.idle_steps;
}

std::vector<int> SpecPolicy::choose(std::span<const SpecCandidate> candidates, int64_t other_tokens,
                                    const StepCostModel& target, const Drafter& drafter) {
  const size_t b = candidates.size();
  std::vector<int> drafts(b, 0);
  if (b == 0) return drafts;
  if (!adaptive_ || !target.calibrated()) {
    for (size_t i = 0; i < b; ++i) drafts[i] = std::min(candidates[i].cap, max_drafts_);
    return drafts;
  }
  std::vector<size_t> order(b);
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> alpha(b), catch_up(b);
  for (size_t i = 0; i < b; ++i) {
    alpha[i] = acceptance(candidates[i].id);
    catch_up[i] = drafter.catch_up_seconds(candidates[i].catch_up);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return alpha[x] > alpha[y]; });

  const double plain_rate = double(b) / std::max(1e-9, target.seconds(other_tokens + int64_t(b)));
  // The best draft length k and number m of requests (the m most likely to be accepted) under
  // acceptances alpha_of(i): the expected tokens per second, the k and the m; m = 0 unless some
  // choice beats plain decoding by `margin`.
  struct Choice {
    double rate;
    int k;
    size_t m;
  };
  auto best = [&](const auto& alpha_of, double margin) {
    Choice c{plain_rate * margin, 0, 0};
    for (int k = 1; k <= max_drafts_; ++k) {
      double tokens = double(b);  // the m best draft, the others decode one token
      int64_t draft_tokens = 0;
      double amortized = 0.0;     // the drafters' catch-up, per step of the requests' remaining output
      for (size_t m = 1; m <= b; ++m) {
        const size_t i = order[m - 1];
        const int ki = std::min(k, candidates[i].cap);
        const double per_step = expected_tokens(alpha_of(i), ki);
        tokens += per_step - 1.0;
        draft_tokens += ki;
        if (catch_up[i] > 0.0) {
          const double horizon = double(std::clamp<int64_t>(candidates[i].remaining, 1, kAmortizeTokens));
          amortized += catch_up[i] / std::max(1.0, horizon / per_step);
        }
        const double cost = target.seconds(other_tokens + int64_t(b) + draft_tokens) +
                            drafter.cost_seconds(int64_t(m), k) + amortized;
        const double rate = tokens / std::max(1e-9, cost);
        if (rate > c.rate) c = {rate, k, m};
      }
    }
    return c;
  };
  const Choice chosen = best([&](size_t i) { return alpha[i]; }, kMargin);
  for (size_t m = 0; m < chosen.m; ++m) drafts[order[m]] = std::min(chosen.k, candidates[order[m]].cap);
  // Requests left idle for long are probed with a short draft, so their estimate stays measured:
  // one per step, the one idle longest, and only where drafting would pay well were every draft
  // accepted (in a compute-bound step a probe only costs the draft's catch-up).
  size_t probe = b;
  Stats* probed = nullptr;
  for (size_t i = 0; i < b; ++i) {
    Stats& s = stats(candidates[i].id);
    s.probing = false;
    if (drafts[i] == 0 && s.idle_steps >= s.probe_steps && (probed == nullptr || s.idle_steps > probed->idle_steps)) {
      probe = i;
      probed = &s;
    }
  }
  if (probed != nullptr && best([](size_t) { return 0.99; }, kProbeMargin).m > 0) {
    probed->probing = true;
    drafts[probe] = std::min(kProbeDrafts, candidates[probe].cap);
  }
  return drafts;
}

}  // namespace kestrel
