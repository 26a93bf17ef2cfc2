// The adaptive policy: how many drafts each speculating request gets this step, or none. Per
// request, the acceptance rate is an exponential moving average of its verifications (the
// per-draft acceptance probability alpha of a geometric model: k drafts yield
// (1 - alpha^(k+1)) / (1 - alpha) tokens). Per step, the draft length k and the set of requests
// that draft (the ones with the best acceptance first) maximise the expected tokens per second
// under the measured step costs (the target's verify cost at the step's token count, the
// drafter's cost), against plain decoding; speculation runs only where it is expected to beat
// plain decoding by a margin (large batches, low acceptance and short outputs turn it off). A
// drafter that must first catch up (a draft model that has not seen the request's prompt, or the
// tokens generated while it did not draft) pays for that once; the policy spreads that cost over
// the request's remaining output (at most kAmortizeTokens), so a short output or a large batch
// does not start a draft model that cannot earn its catch-up back.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "spec/drafter.h"
#include "spec/step_cost.h"

namespace kestrel {

// A request ready to decode that may speculate.
struct SpecCandidate {
  RequestId id = 0;
  int cap = 0;            // the most drafts it may take this step
  int64_t catch_up = 0;   // tokens the drafter computes before its first draft (Drafter::catch_up_tokens)
  int64_t remaining = 0;  // output tokens it may still produce
};

class SpecPolicy {
 public:
  SpecPolicy(int max_drafts, bool adaptive);

  // Drafts for each candidate (at most its cap); `other_tokens` are the step's prefill tokens.
  std::vector<int> choose(std::span<const SpecCandidate> candidates, int64_t other_tokens,
                          const StepCostModel& target, const Drafter& drafter);
  // A verification of `drafted` drafts accepted `accepted`.
  void record(RequestId id, int drafted, int accepted);
  // A step in which the request did not draft: its estimate drifts toward the engine-wide one,
  // and after kProbeSteps such steps choose() probes it with a short draft (so a request turned
  // off is measured again, at a bounded cost). Each probe that accepts nothing doubles the
  // request's wait before its next probe, up to kMaxProbeSteps; any accepted draft resets it (a
  // useless draft costs a probe, and the draft's catch-up, ever more rarely). Probes only in steps
  // where drafting would beat plain decoding by kProbeMargin were every draft accepted (never in
  // compute-bound batches, where a probe's catch-up stalls every request), and at most one per
  // step (the request idle longest), so probes never stall a step all at once. A new request
  // starts with the wait of the last probed request (engine-wide: a useless draft is not probed
  // again at every new request; any accepted draft brings the wait back to kProbeSteps).
  void idle(RequestId id);
  void release(RequestId id) { stats_.erase(id); }
  double acceptance(RequestId id) const;

  static constexpr double kPrior = 0.8;    // engine-wide acceptance assumed before any verification
  static constexpr double kMargin = 1.05;  // expected speed-up required to speculate
  static constexpr double kProbeMargin = 1.25;  // speed-up at full acceptance required to probe
  static constexpr int64_t kAmortizeTokens = 256;  // most output tokens a catch-up is spread over
  static constexpr int kProbeSteps = 32;   // idle steps before a request is probed
  static constexpr int kMaxProbeSteps = 512;
  static constexpr int kProbeDrafts = 2;

 private:
  struct Stats {
    double accepted = 2 * kPrior;  // pseudo-counts: the prior weighs as two trials
    double tried = 2.0;
    int idle_steps = 0;
    int probe_steps = kProbeSteps;  // idle steps before the next probe
    bool probing = false;           // the last choose() probed it
  };
  Stats& stats(RequestId id);
  int max_drafts_;
  bool adaptive_;
  Stats global_;  // every verification (slower decay) and the last probe wait: new requests start from it
  std::unordered_map<RequestId, Stats> stats_;
};

// Expected tokens a verification of k drafts yields with per-draft acceptance alpha.
double expected_tokens(double alpha, int k);

}  // namespace kestrel
