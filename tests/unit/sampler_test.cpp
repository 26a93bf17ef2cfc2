// The sampler (sample/sampler.h): greedy, seeding, top-k / top-p / min-p truncation, temperature,
// the empirical distribution against softmax, penalties and log-probabilities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "sample/sampler.h"

namespace kestrel {
namespace {

const std::vector<TokenId> kNoHistory;

TokenId draw(Sampler& sampler, const std::vector<float>& logits,
             const std::vector<TokenId>& history = kNoHistory) {
  std::vector<float> copy = logits;  // sample() modifies its input
  return sampler.sample(copy, history).token;
}

// A draw for the token at `position` (the sampler's uniform numbers are keyed by position; the
// history holds no real token, so penalties see nothing).
TokenId draw_at(Sampler& sampler, const std::vector<float>& logits, int position) {
  return draw(sampler, logits, std::vector<TokenId>(size_t(position), -1));
}

// Draws at positions 0 .. draws-1 of one seeded sampler.
std::vector<int> histogram(const SamplingParams& params, const std::vector<float>& logits, int draws) {
  Sampler sampler(params);
  std::vector<int> counts(logits.size(), 0);
  std::vector<TokenId> history;
  for (int i = 0; i < draws; ++i) {
    ++counts[size_t(draw(sampler, logits, history))];
    history.push_back(-1);
  }
  return counts;
}

// softmax(logits / temperature) in double.
std::vector<double> softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, double(l));
  std::vector<double> p(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) total += p[i] = std::exp((double(logits[i]) - max_logit) / temperature);
  for (double& v : p) v /= total;
  return p;
}

// Pearson's statistic of observed counts against probabilities (cells with p == 0 must be empty).
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int draws) {
  double stat = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double expected = p[i] * draws;
    stat += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return stat;
}

std::vector<float> random_logits(std::mt19937& rng, int n, float spread) {
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> logits(static_cast<size_t>(n));
  for (float& l : logits) l = normal(rng);
  return logits;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params);
  EXPECT_EQ(draw(sampler, {0.1f, 3.0f, -1.0f, 2.9f}), 1);
  EXPECT_EQ(draw(sampler, {1.0f, 5.0f, 2.0f, 5.0f, 5.0f}), 1);
  EXPECT_EQ(draw(sampler, {-7.0f, -7.0f}), 0);
  EXPECT_EQ(draw(sampler, {-std::numeric_limits<float>::infinity(), -1e30f}), 1);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<float> logits = random_logits(rng, 50, 2.0f);
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(draw(sampler, logits), best);
  }
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDifferentSequence) {
  std::mt19937 rng(5);
  const std::vector<float> logits = random_logits(rng, 20, 0.5f);  // a broad distribution
  auto sequence = [&](uint64_t seed) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.seed = seed;
    Sampler sampler(params);
    std::vector<TokenId> out;
    for (int i = 0; i < 300; ++i) out.push_back(draw_at(sampler, logits, i));
    return out;
  };
  const std::vector<TokenId> a = sequence(17);
  EXPECT_EQ(a, sequence(17));
  EXPECT_GT(std::set<TokenId>(a.begin(), a.end()).size(), 10u) << "not a degenerate draw";
  // 300 draws over ~20 plausible tokens: two seeds agreeing everywhere is essentially impossible.
  for (uint64_t seed : {0ull, 1ull, 18ull, 0xdeadbeefull}) EXPECT_NE(a, sequence(seed)) << seed;
}

TEST(Sampler, TopK1IsGreedyAtAnyTemperature) {
  std::mt19937 rng(11);
  for (float temperature : {0.05f, 1.0f, 5.0f, 1000.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = 1;
    params.seed = 9;
    Sampler sampler(params);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> logits = random_logits(rng, 40, 1.0f);
      if (trial % 10 == 0) logits[7] = logits[3] = 100.0f;  // a tie: the lower id wins
      const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
      EXPECT_EQ(draw(sampler, logits), best) << "temperature " << temperature;
    }
  }
}

TEST(Sampler, TopKNeverLeavesTheKBest) {
  std::mt19937 rng(12);
  const std::vector<float> logits = random_logits(rng, 30, 0.3f);
  std::vector<TokenId> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) { return logits[size_t(a)] > logits[size_t(b)]; });
  for (int k : {2, 5, 13}) {
    SamplingParams params;
    params.temperature = 3.0f;  // flat, so anything outside the top k would show up
    params.top_k = k;
    const std::vector<int> counts = histogram(params, logits, 5000);
    const std::set<TokenId> best(order.begin(), order.begin() + k);
    for (size_t t = 0; t < counts.size(); ++t) {
      if (best.count(TokenId(t))) {
        EXPECT_GT(counts[t], 0) << "k=" << k << " token " << t;
      } else {
        EXPECT_EQ(counts[t], 0) << "k=" << k << " token " << t;
      }
    }
  }
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  // Eight equal logits: probabilities are exactly 1/8, cumulative sums exact multiples of 1/8.
  // top_p = 3/8 is reached exactly at the third token (ties ordered by id), so {0, 1, 2} remain.
  {
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_p = 0.375f;
    const std::vector<int> counts = histogram(params, std::vector<float>(8, 0.5f), 3000);
    for (int t = 0; t < 8; ++t) {
      if (t < 3) {
        EXPECT_GT(counts[size_t(t)], 800) << t;  // each ~1000
      } else {
        EXPECT_EQ(counts[size_t(t)], 0) << t;
      }
    }
  }
  // Probabilities 0.4, 0.3, 0.2, 0.1 on scrambled ids; cumulative 0.4, 0.7, 0.9, 1.0.
  const std::vector<float> logits = {std::log(0.2f), std::log(0.4f), std::log(0.1f), std::log(0.3f)};
  const std::vector<std::pair<float, std::set<TokenId>>> cases = {
      {0.3f, {1}}, {0.65f, {1, 3}}, {0.85f, {1, 3, 0}}, {0.95f, {1, 3, 0, 2}}};
  for (const auto& [top_p, allowed] : cases) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_p = top_p;
    const std::vector<int> counts = histogram(params, logits, 4000);
    for (TokenId t = 0; t < 4; ++t) {
      if (allowed.count(t)) {
        EXPECT_GT(counts[size_t(t)], 0) << "top_p " << top_p << " token " << t;
      } else {
        EXPECT_EQ(counts[size_t(t)], 0) << "top_p " << top_p << " token " << t;
      }
    }
  }
}

TEST(Sampler, MinPExcludesTokensBelowFractionOfBest) {
  // p = 0.5, 0.2, 0.1, 0.09, 0.06, 0.05; min_p 0.19 -> threshold 0.095: keeps the first three.
  const std::vector<double> p = {0.5, 0.2, 0.1, 0.09, 0.06, 0.05};
  std::vector<float> logits;
  for (double v : p) logits.push_back(float(std::log(v)));
  for (auto [min_p, kept] : std::vector<std::pair<float, int>>{{0.19f, 3}, {0.21f, 2}, {0.5f, 1}, {0.05f, 6}}) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.min_p = min_p;
    const std::vector<int> counts = histogram(params, logits, 5000);
    for (int t = 0; t < 6; ++t) {
      if (t < kept) {
        EXPECT_GT(counts[size_t(t)], 0) << "min_p " << min_p << " token " << t;
      } else {
        EXPECT_EQ(counts[size_t(t)], 0) << "min_p " << min_p << " token " << t;
      }
    }
  }
}

TEST(Sampler, TemperatureLimits) {
  const std::vector<float> logits = {0.0f, 1.0f, 1.01f, 0.5f};
  SamplingParams cold;
  cold.temperature = 1e-4f;  // gap 0.01 / 1e-4 = 100 nats: the runner-up has p ~ e^-100
  const std::vector<int> cold_counts = histogram(cold, logits, 2000);
  EXPECT_EQ(cold_counts[2], 2000);

  // At temperature 1e4 every p is 1/4 within 1e-4; 20000 draws: binomial sd 0.0031, allow 6 sd.
  SamplingParams hot;
  hot.temperature = 1e4f;
  const std::vector<int> hot_counts = histogram(hot, logits, 20000);
  for (int c : hot_counts) EXPECT_NEAR(c / 20000.0, 0.25, 0.019);
}

TEST(Sampler, EmpiricalFrequenciesMatchSoftmax) {
  // 20000 draws over 10 tokens: Pearson's statistic has 9 degrees of freedom; 44.8 is its
  // 1 - 1e-6 quantile, so a correct sampler fails this with probability 1e-6 (seeds are fixed).
  constexpr int kDraws = 20000;
  constexpr double kChi2Df9 = 44.8;
  std::mt19937 rng(21);
  const std::vector<float> logits = random_logits(rng, 10, 1.0f);
  for (float temperature : {1.0f, 0.7f, 2.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 1000 + uint64_t(temperature * 10);
    const std::vector<int> counts = histogram(params, logits, kDraws);
    EXPECT_LT(chi_square(counts, softmax(logits, temperature), kDraws), kChi2Df9) << temperature;
  }
  // Truncation renormalises over the survivors: top_k = 4 gives softmax over the 4 best (3 df,
  // 1 - 1e-6 quantile 30.7, so 44.8 is looser still but a wrong distribution lands in the hundreds).
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 4;
  std::vector<float> truncated = logits;
  std::vector<float> sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (float& l : truncated) if (l < sorted[3]) l = -std::numeric_limits<float>::infinity();
  const std::vector<int> counts = histogram(params, logits, kDraws);
  EXPECT_LT(chi_square(counts, softmax(truncated), kDraws), 30.7);
}

// Runs the penalties through a greedy sampler and returns the logits it left behind.
std::vector<float> penalised(const SamplingParams& base, std::vector<float> logits,
                             const std::vector<TokenId>& history) {
  SamplingParams params = base;
  params.temperature = 0.0f;
  Sampler sampler(params);
  sampler.sample(logits, history);
  return logits;
}

TEST(Sampler, RepetitionPenaltyOnlyInsideWindow) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;  // a power of two: every expected value below is exact
  params.penalty_last_n = 3;
  const std::vector<float> logits = {2.0f, -2.0f, 3.0f, -3.0f, 1.0f, 0.0f};
  // History oldest first; the window is the last 3: {1, 4, 4}. Token 2 is older and untouched,
  // and token 4 twice is still divided once.
  const std::vector<TokenId> history = {2, 3, 1, 4, 4};
  EXPECT_EQ(penalised(params, logits, history),
            (std::vector<float>{2.0f, -4.0f, 3.0f, -3.0f, 0.5f, 0.0f}));
  params.penalty_last_n = -1;  // everything
  EXPECT_EQ(penalised(params, logits, history),
            (std::vector<float>{2.0f, -4.0f, 1.5f, -6.0f, 0.5f, 0.0f}));
  params.penalty_last_n = 0;  // nothing
  EXPECT_EQ(penalised(params, logits, history), logits);
  params.penalty_last_n = 100;  // longer than the history
  EXPECT_EQ(penalised(params, logits, {0, 5, -1, 6, 99}),
            (std::vector<float>{1.0f, -2.0f, 3.0f, -3.0f, 1.0f, 0.0f}))
      << "ids outside the vocabulary are ignored; a zero logit stays zero";
}

TEST(Sampler, FrequencyAndPresencePenaltiesSubtract) {
  SamplingParams params;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  params.penalty_last_n = -1;
  const std::vector<float> logits(5, 1.0f);
  const std::vector<TokenId> history = {3, 3, 1, 3, 0, 0};
  // token: count -> 1 - (count * 0.5 + 0.25)
  EXPECT_EQ(penalised(params, logits, history),
            (std::vector<float>{-0.25f, 0.25f, 1.0f, -0.75f, 1.0f}));
  params.penalty_last_n = 2;  // only {0, 0}
  EXPECT_EQ(penalised(params, logits, history), (std::vector<float>{-0.25f, 1.0f, 1.0f, 1.0f, 1.0f}));
  // Penalties steer the choice: token 3 would win greedily without them.
  params.penalty_last_n = -1;
  Sampler sampler([&] { SamplingParams p = params; p.temperature = 0.0f; return p; }());
  EXPECT_EQ(draw(sampler, {0.0f, 0.0f, 0.0f, 1.5f, 0.1f}, history), 4);
}

TEST(Sampler, ComputeLogprobsIsLogSoftmax) {
  std::mt19937 rng(31);
  std::vector<float> logits = random_logits(rng, 100, 3.0f);
  logits[40] = logits[41] = 20.0f;  // a tie at the top: lower id first
  const std::vector<double> p = softmax(logits);
  double total = 0.0;
  for (TokenId t = 0; t < 100; ++t) {
    SampleResult result;
    compute_logprobs(logits, t, 0, &result);
    // Float log-sum-exp over 100 values: absolute error a few ulp of the largest term (~20).
    EXPECT_NEAR(result.logprob, std::log(p[size_t(t)]), 1e-5) << t;
    EXPECT_TRUE(result.top_logprobs.empty());
    total += std::exp(double(result.logprob));
  }
  EXPECT_NEAR(total, 1.0, 1e-5);

  SampleResult result;
  compute_logprobs(logits, 3, 6, &result);
  ASSERT_EQ(result.top_logprobs.size(), 6u);
  EXPECT_EQ(result.top_logprobs[0].token, 40);
  EXPECT_EQ(result.top_logprobs[1].token, 41);
  for (size_t i = 0; i < 6; ++i) {
    const TokenLogprob& e = result.top_logprobs[i];
    EXPECT_NEAR(e.logprob, std::log(p[size_t(e.token)]), 1e-5);
    if (i > 0) {
      EXPECT_GE(result.top_logprobs[i - 1].logprob, e.logprob);
    }
  }
  // Nothing outside the list beats its last entry.
  std::set<TokenId> listed;
  for (const TokenLogprob& e : result.top_logprobs) listed.insert(e.token);
  for (TokenId t = 0; t < 100; ++t) {
    if (!listed.count(t)) {
      EXPECT_LE(logits[size_t(t)], logits[size_t(result.top_logprobs[5].token)]);
    }
  }
  compute_logprobs(std::vector<float>{1.0f, 2.0f}, 0, 10, &result);
  EXPECT_EQ(result.top_logprobs.size(), 2u) << "top_n larger than the vocabulary";
}

TEST(Sampler, SampleReportsLogprobsOfRawLogits) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 4.0f;
  params.top_logprobs = 2;
  Sampler sampler(params);
  const std::vector<float> raw = {3.0f, 2.0f, 0.0f};
  std::vector<float> logits = raw;
  const std::vector<TokenId> history = {0};
  const SampleResult result = sampler.sample(logits, history);
  EXPECT_EQ(result.token, 1) << "3 / 4 < 2 after the penalty";
  const std::vector<double> p = softmax(raw);
  EXPECT_NEAR(result.logprob, std::log(p[1]), 1e-6) << "logprob is under the unpenalised logits";
  ASSERT_EQ(result.top_logprobs.size(), 2u);
  EXPECT_EQ(result.top_logprobs[0].token, 0);
  EXPECT_NEAR(result.top_logprobs[0].logprob, std::log(p[0]), 1e-6);

  params.top_logprobs = -1;
  Sampler quiet(params);
  logits = raw;
  EXPECT_TRUE(quiet.sample(logits, history).top_logprobs.empty());
}

}  // namespace
}  // namespace kestrel
