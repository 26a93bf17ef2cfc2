// Speculative verification and drafting without a model: n-gram prompt lookup, the verification
// of one-hot drafts against the tokens plain decoding draws (greedy and seeded sampling), exact
// rejection sampling with a draft distribution (the output's distribution is the target's,
// checked by Pearson's test against the target's probabilities), and the adaptive policy's
// decisions under a cost model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "sample/sampler.h"
#include "spec/ngram_drafter.h"
#include "spec/spec_policy.h"
#include "spec/verify.h"

namespace kestrel {
namespace {

std::vector<float> random_row(std::mt19937& rng, int n, float spread) {
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> row(static_cast<size_t>(n), 0.0f);
  for (float& x : row) x = normal(rng);
  return row;
}

TEST(NgramDrafter, ProposesWhatFollowedTheMostRecentEarlierMatch) {
  const NgramDrafter drafter(2, 4);
  // ... 5 6 7 8 9 ... 5 6 7 1 2 ... 5 6 7 -> the latest earlier "5 6 7" was followed by 1 2.
  const std::vector<TokenId> tokens = {5, 6, 7, 8, 9, 3, 5, 6, 7, 1, 2, 4, 5, 6, 7};
  EXPECT_EQ(drafter.lookup(tokens, 3), (std::vector<TokenId>{1, 2, 4}));
  EXPECT_EQ(drafter.lookup(tokens, 1), (std::vector<TokenId>{1}));
  // A proposal stops at the end of the sequence.
  const std::vector<TokenId> near_end = {3, 4, 9, 3, 4};
  EXPECT_EQ(drafter.lookup(near_end, 5), (std::vector<TokenId>{9, 3, 4}));
  // The longest match wins over a more recent shorter one: "1 2 3" occurred once, followed by 9;
  // "2 3" alone most recently by 8.
  const std::vector<TokenId> longest = {1, 2, 3, 9, 0, 2, 3, 8, 0, 1, 2, 3};
  EXPECT_EQ(drafter.lookup(longest, 1), (std::vector<TokenId>{9}));
  // No match of at least min_ngram tokens: nothing.
  EXPECT_TRUE(drafter.lookup(std::vector<TokenId>{1, 2, 3, 4, 5, 1}, 4).empty());
  const NgramDrafter unigram(1, 3);
  EXPECT_EQ(unigram.lookup(std::vector<TokenId>{1, 2, 3, 4, 5, 1}, 2), (std::vector<TokenId>{2, 3}));
}

TEST(VerifyDrafts, GreedyAcceptsTheMatchingPrefixThenTheTargetsToken) {
  constexpr int kVocab = 9;
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params);
  // Argmax of rows 0..3: 4, 5, 1, 2.
  std::vector<float> rows(4 * kVocab, 0.0f);
  const TokenId best[] = {4, 5, 1, 2};
  for (int r = 0; r < 4; ++r) rows[size_t(r * kVocab + best[r])] = 3.0f;
  const std::vector<TokenId> history = {1, 2, 3};
  std::vector<SampleResult> samples;
  std::vector<float> copy = rows;
  EXPECT_EQ(verify_drafts(sampler, copy, history, std::vector<TokenId>{4, 5, 6}, {}, &samples),
            (std::vector<TokenId>{4, 5, 1}));
  EXPECT_EQ(samples.size(), 3u);
  copy = rows;
  EXPECT_EQ(verify_drafts(sampler, copy, history, std::vector<TokenId>{4, 5, 1}, {}, nullptr),
            (std::vector<TokenId>{4, 5, 1, 2}));  // all accepted: the bonus token from row 3
  copy = rows;
  EXPECT_EQ(verify_drafts(sampler, copy, history, std::vector<TokenId>{0, 5, 1}, {}, nullptr),
            (std::vector<TokenId>{4}));
}

// One-hot drafts with a sampling request produce exactly the tokens plain sampling draws at the
// same positions, however many drafts are accepted (the uniform numbers are keyed by position).
TEST(VerifyDrafts, OneHotDraftsGiveThePlainSamplersTokens) {
  constexpr int kVocab = 40, kRows = 6;
  std::mt19937 rng(3);
  SamplingParams params;
  params.temperature = 0.9f;
  params.top_p = 0.95f;
  params.repetition_penalty = 1.3f;
  int accepted_any = 0;
  for (int trial = 0; trial < 300; ++trial) {
    params.seed = uint64_t(trial);
    std::vector<float> rows;
    for (int r = 0; r < kRows; ++r) {
      const std::vector<float> row = random_row(rng, kVocab, 2.5f);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    const std::vector<TokenId> history = {3, 3, 7};
    // Plain decoding: row i is what the model gives after history + the first i outputs.
    Sampler plain(params);
    std::vector<TokenId> seq = history, expected;
    for (int r = 0; r < kRows; ++r) {
      std::vector<float> row(rows.begin() + r * kVocab, rows.begin() + (r + 1) * kVocab);
      expected.push_back(plain.sample(row, seq).token);
      seq.push_back(expected.back());
    }
    // Drafts: the plain tokens up to a random point, then a wrong one.
    const int good = int(rng() % kRows);
    std::vector<TokenId> drafts(expected.begin(), expected.begin() + std::min(good, kRows - 1));
    if (int(drafts.size()) < kRows - 1) drafts.push_back((expected[drafts.size()] + 1) % kVocab);
    Sampler spec(params);
    std::vector<float> copy(rows.begin(), rows.begin() + (int(drafts.size()) + 1) * kVocab);
    const std::vector<TokenId> got = verify_drafts(spec, copy, history, drafts, {}, nullptr);
    ASSERT_LE(got.size(), drafts.size() + 1);
    EXPECT_EQ(got, std::vector<TokenId>(expected.begin(), expected.begin() + std::ptrdiff_t(got.size()))) << trial;
    EXPECT_EQ(int(got.size()), std::min(good, kRows - 1) + 1) << trial;
    accepted_any += got.size() > 1;
  }
  EXPECT_GT(accepted_any, 100);
}

// Rejection sampling with drafts drawn from q: the first output token follows p exactly, and so
// does the second given the first (checked for the most frequent first token).
TEST(VerifyDrafts, RejectionSamplingWithADraftDistributionFollowsTheTarget) {
  constexpr int kVocab = 8;
  constexpr int kTrials = 60000;
  std::mt19937 rng(17);
  const std::vector<float> p0 = random_row(rng, kVocab, 1.0f), q0 = random_row(rng, kVocab, 1.0f);
  const std::vector<float> p1 = random_row(rng, kVocab, 1.0f), q1 = random_row(rng, kVocab, 1.0f);
  SamplingParams params;
  params.temperature = 1.0f;
  auto dist = [&](const std::vector<float>& logits) {
    ProcessorChain chain(params);
    std::vector<float> copy = logits;
    TokenDistribution d;
    chain.process(copy, {}, &d);
    return d;
  };
  const TokenDistribution qd0 = dist(q0), qd1 = dist(q1), pd0 = dist(p0), pd1 = dist(p1);
  std::vector<int> first(kVocab, 0), second(kVocab, 0);
  int second_total = 0;
  const TokenId watched = TokenId(std::max_element(pd0.probs.begin(), pd0.probs.end()) - pd0.probs.begin());
  for (int t = 0; t < kTrials; ++t) {
    params.seed = uint64_t(t) + 12345;
    Sampler sampler(params);
    // The draft draws its two tokens from q (its own stream of uniforms).
    const TokenId d0 = draw_token(qd0, sampler.uniform(100, 7));
    const TokenId d1 = draw_token(qd1, sampler.uniform(101, 7));
    // The target's row 1 does not depend on d0 here (a fixed conditional), row 2 is p1 again.
    std::vector<float> rows = p0;
    rows.insert(rows.end(), p1.begin(), p1.end());
    rows.insert(rows.end(), p1.begin(), p1.end());
    const std::vector<TokenDistribution> qs = {qd0, qd1};
    const std::vector<TokenId> got = verify_drafts(sampler, rows, std::vector<TokenId>{}, std::vector<TokenId>{d0, d1}, qs, nullptr);
    ASSERT_GE(got.size(), 1u);
    ++first[size_t(got[0])];
    if (got.size() >= 2 && got[0] == watched) {
      ++second[size_t(got[1])];
      ++second_total;
    }
  }
  // Pearson's statistic, 7 degrees of freedom: 29.9 is the 1 - 1e-4 quantile.
  auto chi2 = [&](const std::vector<int>& counts, const TokenDistribution& p, int total) {
    double stat = 0.0;
    for (int v = 0; v < kVocab; ++v) {
      const double e = double(p.probs[size_t(v)]) * total;
      stat += (counts[size_t(v)] - e) * (counts[size_t(v)] - e) / e;
    }
    return stat;
  };
  EXPECT_LT(chi2(first, pd0, kTrials), 29.9);
  ASSERT_GT(second_total, 2000);
  EXPECT_LT(chi2(second, pd1, second_total), 29.9);
  // A sampler that accepted every draft would follow q instead: the test can tell.
  std::vector<int> q_counts(kVocab, 0);
  for (int t = 0; t < kTrials; ++t) {
    params.seed = uint64_t(t) + 12345;
    ++q_counts[size_t(draw_token(qd0, Sampler(params).uniform(100, 7)))];
  }
  EXPECT_GT(chi2(q_counts, pd0, kTrials), 29.9);
}

// A fixed cost model: a step of n tokens costs 10 ms + 0.5 ms per token (memory-bound: extra
// tokens are cheap), or compute-bound at 10 ms per token.
StepCostModel cost_model(double fixed, double per_token) {
  StepCostModel model(256);
  for (int64_t n = 1; n <= 256; n *= 2) model.observe(n, fixed + per_token * double(n));
  return model;
}

// Candidates with ids `ids` and caps `caps`, nothing to catch up, 1,000 output tokens to go.
std::vector<SpecCandidate> candidates(const std::vector<RequestId>& ids, const std::vector<int>& caps) {
  std::vector<SpecCandidate> out;
  for (size_t i = 0; i < ids.size(); ++i) out.push_back({ids[i], caps[i], 0, 1000});
  return out;
}

class FreeDrafter final : public Drafter {
 public:
  void propose(std::span<const DraftQuery>, std::span<DraftProposal>) override {}
  void release(RequestId) override {}
  double cost_seconds(int64_t, int) const override { return 0.0; }
  const char* name() const override { return "free"; }
};

TEST(SpecPolicy, SpeculatesWhereItPaysAndStopsWhereItDoesNot) {
  const FreeDrafter drafter;
  const StepCostModel memory_bound = cost_model(0.010, 0.0005);
  const StepCostModel compute_bound = cost_model(0.0001, 0.010);
  ASSERT_TRUE(memory_bound.calibrated());
  EXPECT_NEAR(memory_bound.seconds(3), 0.0115, 1e-9);

  SpecPolicy policy(6, /*adaptive=*/true);
  const std::vector<RequestId> one = {1};
  // A fresh request (prior acceptance) at batch 1 on a memory-bound machine: speculate.
  EXPECT_GT(policy.choose(candidates(one, {6}), 0, memory_bound, drafter)[0], 0);
  // Compute-bound: a verify row costs as much as a token; never pays.
  EXPECT_EQ(policy.choose(candidates(one, {6}), 0, compute_bound, drafter)[0], 0);
  // Drafts that are always rejected: the estimate falls and speculation stops.
  for (int i = 0; i < 10; ++i) policy.record(1, 4, 0);
  EXPECT_LT(policy.acceptance(1), 0.1);
  EXPECT_EQ(policy.choose(candidates(one, {6}), 0, memory_bound, drafter)[0], 0);
  // Always accepted: the longest drafts.
  for (int i = 0; i < 20; ++i) policy.record(2, 6, 6);
  EXPECT_EQ(policy.choose(candidates({2}, {6}), 0, memory_bound, drafter)[0], 6);
  // Idle steps bring a turned-off request back toward the prior, so it is tried again.
  for (int i = 0; i < 200; ++i) policy.idle(1);
  EXPECT_GT(policy.choose(candidates(one, {6}), 0, memory_bound, drafter)[0], 0);
  // Without adaptation every request gets its cap.
  SpecPolicy fixed(6, /*adaptive=*/false);
  EXPECT_EQ(fixed.choose(candidates({1, 2}, {6, 2}), 0, compute_bound, drafter),
            (std::vector<int>{6, 2}));
}

// A draft step costing 60% of a memory-bound target step: drafting pays only with high acceptance.
class CostlyDrafter final : public Drafter {
 public:
  void propose(std::span<const DraftQuery>, std::span<DraftProposal>) override {}
  void release(RequestId) override {}
  double cost_seconds(int64_t, int num_drafts) const override { return 0.006 * num_drafts; }
  const char* name() const override { return "costly"; }
};

// A request whose drafts are never accepted is probed after 32 idle steps, then 64, 128, ... up to
// 512; an accepted draft brings the wait back to 32. Where drafting cannot pay even with every
// draft accepted (compute-bound), it is never probed.
TEST(SpecPolicy, ProbesOfAUselessDraftBackOff) {
  const CostlyDrafter drafter;
  const StepCostModel memory_bound = cost_model(0.010, 0.0005);
  SpecPolicy policy(4, /*adaptive=*/true);
  const std::vector<RequestId> one = {1};
  const std::vector<int> cap = {4};
  for (int i = 0; i < 10; ++i) policy.record(1, 4, 0);  // useless: only probes draft from here on
  ASSERT_EQ(policy.choose(candidates(one, cap), 0, memory_bound, drafter)[0], 0);
  // Idle steps until the next probe (choose() with the request idle each step).
  auto steps_to_probe = [&] {
    for (int step = 1; step <= 4096; ++step) {
      policy.idle(1);
      const int drafts = policy.choose(candidates(one, cap), 0, memory_bound, drafter)[0];
      if (drafts > 0) {
        EXPECT_EQ(drafts, SpecPolicy::kProbeDrafts);
        return step;
      }
    }
    return -1;
  };
  EXPECT_EQ(steps_to_probe(), 32);
  for (const int expected : {64, 128, 256, 512, 512}) {
    policy.record(1, SpecPolicy::kProbeDrafts, 0);
    EXPECT_EQ(steps_to_probe(), expected);
  }
  // A new request while the draft is useless waits as long as the last probe did ...
  const std::vector<RequestId> next = {7};
  int first_probe = -1;
  for (int step = 1; step <= 1024 && first_probe < 0; ++step) {
    if (policy.choose(candidates(next, cap), 0, memory_bound, drafter)[0] > 0) first_probe = step;
    policy.idle(7);
  }
  EXPECT_EQ(first_probe, 513);
  // ... and an accepted draft brings every wait back to 32.
  policy.record(1, SpecPolicy::kProbeDrafts, 1);
  EXPECT_EQ(steps_to_probe(), 32);

  const StepCostModel compute_bound = cost_model(0.0001, 0.010);
  SpecPolicy busy(4, /*adaptive=*/true);
  for (int i = 0; i < 10; ++i) busy.record(2, 4, 0);
  const std::vector<RequestId> two = {2};
  for (int step = 0; step < 600; ++step) {
    busy.idle(2);
    ASSERT_EQ(busy.choose(candidates(two, cap), 0, compute_bound, drafter)[0], 0) << "step " << step;
  }
}

// A draft model: 6 ms per draft round, 2.7 ms per token of catch-up (the Qwen 0.5B's prompt rate
// on 2 cores), `behind` tokens to catch up for every request.
class CatchUpDrafter final : public Drafter {
 public:
  explicit CatchUpDrafter(int64_t behind) : behind_(behind) {}
  void propose(std::span<const DraftQuery>, std::span<DraftProposal>) override {}
  void release(RequestId) override {}
  double cost_seconds(int64_t, int num_drafts) const override { return 0.006 * num_drafts; }
  int64_t catch_up_tokens(RequestId, std::span<const TokenId>) const override { return behind_; }
  double catch_up_seconds(int64_t tokens) const override { return 0.0027 * double(tokens); }
  const char* name() const override { return "catch-up"; }

 private:
  int64_t behind_;
};

// The catch-up is paid once and spread over the output still to come: a long output earns it
// back, a short one does not.
TEST(SpecPolicy, ACatchUpIsWorthItOnlyForTheOutputLeft) {
  const StepCostModel memory_bound = cost_model(0.010, 0.0005);
  const CatchUpDrafter behind(128);
  SpecPolicy policy(4, /*adaptive=*/true);
  for (int i = 0; i < 20; ++i) policy.record(1, 4, 4);  // a draft that is always right
  EXPECT_GT(policy.choose(std::vector<SpecCandidate>{{1, 4, 128, 512}}, 0, memory_bound, behind)[0], 0);
  EXPECT_EQ(policy.choose(std::vector<SpecCandidate>{{1, 4, 128, 8}}, 0, memory_bound, behind)[0], 0);
  // In step with the request: even the last few tokens are drafted.
  const CatchUpDrafter in_step(0);
  EXPECT_GT(policy.choose(std::vector<SpecCandidate>{{1, 4, 0, 8}}, 0, memory_bound, in_step)[0], 0);
}

// Idle requests are probed one per step (the one idle longest), never all in the same step.
TEST(SpecPolicy, ProbesAreSpreadOverSteps) {
  const CatchUpDrafter drafter(0);
  const StepCostModel memory_bound = cost_model(0.010, 0.0005);
  SpecPolicy policy(4, /*adaptive=*/true);
  const std::vector<RequestId> ids = {1, 2, 3};
  for (const RequestId id : ids) {
    for (int i = 0; i < 10; ++i) policy.record(id, 4, 0);
  }
  std::vector<int> probed_at(ids.size(), -1);
  for (int step = 1; step <= 40; ++step) {
    const std::vector<int> drafts = policy.choose(candidates(ids, {4, 4, 4}), 0, memory_bound, drafter);
    int probes = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (drafts[i] > 0) {
        ++probes;
        if (probed_at[i] < 0) probed_at[i] = step;
        policy.record(ids[i], drafts[i], 0);
      } else {
        policy.idle(ids[i]);
      }
    }
    ASSERT_LE(probes, 1) << "step " << step;
  }
  EXPECT_EQ(probed_at, (std::vector<int>{33, 34, 35}));
}

// The step costs measured for Qwen2.5-Coder-1.5B Q4_K_M on 2 cores (Xeon, AVX-512: 16 tokens
// 0.19 s, 32 tokens 0.28 s, 64 tokens 0.50 s) with the 0.5B as draft: at 16 decoding requests
// even drafts that are always accepted gain under 10%, so idle requests are not probed there
// (a probe's catch-up of a 128-token prompt stalls the whole batch); at batch 1 they are.
TEST(SpecPolicy, AComputeBoundServingBatchIsNotProbed) {
  StepCostModel target(256);
  for (const auto& [n, t] : std::vector<std::pair<int64_t, double>>{
           {1, 0.044}, {2, 0.048}, {4, 0.060}, {8, 0.100}, {16, 0.19}, {32, 0.28}, {64, 0.50}, {128, 0.95}}) {
    target.observe(n, t);
  }
  const CatchUpDrafter drafter(128);
  SpecPolicy policy(4, /*adaptive=*/true);
  std::vector<RequestId> ids;
  for (RequestId id = 1; id <= 16; ++id) {
    ids.push_back(id);
    for (int i = 0; i < 10; ++i) policy.record(id, 2, 0);
  }
  std::vector<SpecCandidate> batch;
  for (const RequestId id : ids) batch.push_back({id, 4, 128, 128});
  for (int step = 0; step < 600; ++step) {
    const std::vector<int> drafts = policy.choose(batch, 0, target, drafter);
    ASSERT_EQ(std::count(drafts.begin(), drafts.end(), 0), 16) << "step " << step;
    for (const RequestId id : ids) policy.idle(id);
  }
  SpecPolicy alone(4, /*adaptive=*/true);
  for (int i = 0; i < 10; ++i) alone.record(1, 2, 0);
  int probes = 0;
  for (int step = 0; step < 600; ++step) {
    const int drafts = alone.choose(std::vector<SpecCandidate>{{1, 4, 128, 4096}}, 0, target, drafter)[0];
    if (drafts > 0) {
      ++probes;
      alone.record(1, drafts, 0);
    } else {
      alone.idle(1);
    }
  }
  EXPECT_GE(probes, 3);  // after 32, 64, 128 and 256 idle steps
}

TEST(SpecPolicy, ExpectedTokensFollowTheGeometricModel) {
  EXPECT_DOUBLE_EQ(expected_tokens(0.0, 5), 1.0);
  EXPECT_DOUBLE_EQ(expected_tokens(1.0, 5), 6.0);
  EXPECT_NEAR(expected_tokens(0.5, 3), 1.875, 1e-12);
}

}  // namespace
}  // namespace kestrel
