// The adaptive policy: how many drafts each speculating request gets this step, or none. Per
// request, the acceptance rate is an exponential moving average of its verifications (the
// per-draft acceptance probability alpha of a geometric model: k drafts yield
// (1 - alpha^(k+1)) / (1 - alpha) tokens). Per step, the draft length k and the set of requests
// that draft (the ones with the best acceptance first) maximise the expected tokens per second
// under the measured step costs (the target's verify cost at the step's token count, the
// drafter's cost), against plain decoding; speculation runs only where it is expected to beat
// plain decoding by a margin (large batches, low acceptance and short outputs turn it off).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "spec/drafter.h"
#include "spec/step_cost.h"

namespace kestrel {

class SpecPolicy {
 public:
  SpecPolicy(int max_drafts, bool adaptive);

  // Drafts for each request of `ids` (requests ready to decode that speculate), at most caps[i]
  // each; `other_tokens` are the step's prefill tokens.
  std::vector<int> choose(std::span<const RequestId> ids, std::span<const int> caps, int64_t other_tokens,
                          const StepCostModel& target, const Drafter& drafter);
  // A verification of `drafted` drafts accepted `accepted`.
  void record(RequestId id, int drafted, int accepted);
  // A step in which the request did not draft: its estimate drifts toward the engine-wide one,
  // and after kProbeSteps such steps choose() probes it with a short draft (so a request turned
  // off is measured again, at a bounded cost). Each probe that accepts nothing doubles the
  // request's wait before its next probe, up to kMaxProbeSteps; any accepted draft resets it (a
  // useless draft costs a probe, and the draft's catch-up, ever more rarely). No probes in steps
  // where drafting could not pay even with every draft accepted (compute-bound batches).
  void idle(RequestId id);
  void release(RequestId id) { stats_.erase(id); }
  double acceptance(RequestId id) const;

  static constexpr double kPrior = 0.8;    // engine-wide acceptance assumed before any verification
  static constexpr double kMargin = 1.05;  // expected speed-up required to speculate
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
  Stats global_;  // every verification (slower decay): new requests start from it
  std::unordered_map<RequestId, Stats> stats_;
};

// Expected tokens a verification of k drafts yields with per-draft acceptance alpha.
double expected_tokens(double alpha, int k);

}  // namespace kestrel
