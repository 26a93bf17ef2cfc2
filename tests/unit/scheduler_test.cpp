// Scheduler driven by a fake runner (no model): token budget, chunked prefill, preemption and
// resumption, rejection of impossible requests, abort mid-prefill, priorities, static batching.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "sched/scheduler.h"

namespace kestrel {
namespace {

constexpr TokenId kEos = 2;

std::unique_ptr<Request> make_request(RequestId id, int64_t prompt_len, int64_t max_tokens,
                                      int priority = 0) {
  auto r = std::make_unique<Request>();
  r->id = id;
  for (int64_t i = 0; i < prompt_len; ++i) r->tokens.push_back(TokenId(100 + i % 50));
  r->num_prompt_tokens = prompt_len;
  r->max_tokens = max_tokens;
  r->priority = priority;
  r->stop_tokens = {kEos};
  return r;
}

// Plays the model: every sampled token is 7 (never EOS) unless `eos_after` says otherwise.
struct FakeEngine {
  KVCacheManager kv;
  Scheduler scheduler;
  std::map<RequestId, int64_t> eos_after;  // request -> output count at which EOS is produced
  std::vector<SchedulerOutput> history;
  std::map<RequestId, std::unique_ptr<Request>> finished;

  FakeEngine(int32_t blocks, int block_size, SchedulerConfig config, bool prefix_caching = false)
      : kv(blocks, block_size, prefix_caching), scheduler(config, kv) {}

  SchedulerOutput step() {
    SchedulerOutput out = scheduler.schedule();
    std::vector<std::vector<TokenId>> sampled;
    for (const auto& s : out.scheduled) {
      // Slots must cover every scheduled position.
      EXPECT_GE(int64_t(kv.block_table(s.request->id).size()) * kv.block_size(),
                s.num_computed_tokens + s.num_scheduled_tokens);
      sampled.emplace_back();
      if (!s.samples()) continue;
      const auto it = eos_after.find(s.request->id);
      sampled.back().push_back(it != eos_after.end() && s.request->num_output_tokens() + 1 >= it->second ? kEos : 7);
    }
    scheduler.update_from_output(out, sampled);
    for (auto& r : scheduler.take_finished()) finished[r->id] = std::move(r);
    history.push_back(out);
    return out;
  }

  void run_to_completion(int max_steps = 10000) {
    for (int i = 0; i < max_steps && scheduler.has_unfinished(); ++i) step();
    ASSERT_FALSE(scheduler.has_unfinished()) << "queue stuck";
  }
};

SchedulerConfig config(int64_t budget, int max_seqs, int64_t max_len = 4096) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.max_model_len = max_len;
  return c;
}

TEST(Scheduler, LongPromptIsPrefilledInChunksWithinTheBudget) {
  FakeEngine e(64, 16, config(32, 8));
  e.scheduler.add_request(make_request(1, 100, 3));
  std::vector<int64_t> chunks;
  std::vector<bool> samples;
  e.run_to_completion();
  for (const auto& out : e.history) {
    EXPECT_LE(out.num_scheduled_tokens, 32);
    for (const auto& s : out.scheduled) {
      chunks.push_back(s.num_scheduled_tokens);
      samples.push_back(s.samples());
    }
  }
  EXPECT_EQ(chunks, (std::vector<int64_t>{32, 32, 32, 4, 1, 1}));
  EXPECT_EQ(samples, (std::vector<bool>{false, false, false, true, true, true}));
  ASSERT_EQ(e.finished.count(1), 1u);
  EXPECT_EQ(e.finished[1]->num_output_tokens(), 3);
  EXPECT_EQ(e.finished[1]->finish_reason, FinishReason::Length);
  EXPECT_EQ(e.kv.num_free_blocks(), 64);
}

TEST(Scheduler, DecodesKeepFlowingDuringAnotherRequestsPrefill) {
  FakeEngine e(256, 16, config(64, 8));
  e.scheduler.add_request(make_request(1, 10, 50));
  e.step();  // request 1 prefilled
  e.scheduler.add_request(make_request(2, 1000, 2));
  for (int i = 0; i < 10; ++i) {
    const auto out = e.step();
    ASSERT_FALSE(out.scheduled.empty());
    EXPECT_EQ(out.scheduled[0].request->id, 1u) << "running decode goes first";
    EXPECT_EQ(out.scheduled[0].num_scheduled_tokens, 1);
    EXPECT_LE(out.num_scheduled_tokens, 64);
    if (out.scheduled.size() > 1) {
      EXPECT_EQ(out.scheduled[1].num_scheduled_tokens, 63);
    }
  }
  e.run_to_completion();
  EXPECT_EQ(e.kv.num_free_blocks(), 256);
}

TEST(Scheduler, RespectsMaxNumSeqs) {
  FakeEngine e(256, 16, config(4096, 3));
  for (RequestId id = 1; id <= 7; ++id) e.scheduler.add_request(make_request(id, 5, 4));
  const auto out = e.step();
  EXPECT_EQ(out.scheduled.size(), 3u);
  EXPECT_EQ(e.scheduler.num_waiting(), 4u);
  e.run_to_completion();
  EXPECT_EQ(e.finished.size(), 7u);
  for (const auto& out : e.history) EXPECT_LE(out.scheduled.size(), 3u);
}

TEST(Scheduler, PreemptsNewestWhenBlocksRunOutAndResumesIt) {
  // 6 blocks of 4 tokens. Two requests of 8-token prompts grow by one token per step; together
  // they need more than 24 slots, so the newer one is preempted and recomputed later.
  FakeEngine e(6, 4, config(64, 8));
  e.scheduler.add_request(make_request(1, 8, 10));
  e.scheduler.add_request(make_request(2, 8, 10));
  e.run_to_completion();
  EXPECT_GT(e.scheduler.num_preemptions(), 0);
  bool saw_preempted_2 = false;
  for (const auto& out : e.history) {
    for (RequestId id : out.preempted) {
      EXPECT_EQ(id, 2u) << "the newest request is the victim";
      saw_preempted_2 = true;
    }
  }
  EXPECT_TRUE(saw_preempted_2);
  ASSERT_EQ(e.finished.size(), 2u);
  for (auto& [id, r] : e.finished) {
    EXPECT_EQ(r->num_output_tokens(), 10) << id;
    EXPECT_EQ(r->finish_reason, FinishReason::Length);
  }
  EXPECT_GE(e.finished[2]->num_preemptions, 1);
  // A resumed request recomputes prompt + generated tokens from position 0.
  bool recomputed = false;
  for (size_t i = 1; i < e.history.size(); ++i) {
    for (const auto& s : e.history[i].scheduled) {
      if (s.request == nullptr || s.num_computed_tokens != 0) continue;
      if (s.num_scheduled_tokens > 8) recomputed = true;
    }
  }
  EXPECT_TRUE(recomputed);
  EXPECT_EQ(e.kv.num_free_blocks(), 6);
}

TEST(Scheduler, PreemptionUnschedulesAVictimAlreadyPlannedThisStep) {
  // Priorities make the *first* running request the victim while a later one needs a block.
  FakeEngine e(4, 4, config(64, 8));
  e.scheduler.add_request(make_request(1, 4, 8, /*priority=*/5));
  e.step();  // request 1 runs first, so it sits before request 2 in the running list
  e.scheduler.add_request(make_request(2, 4, 8, /*priority=*/0));
  e.run_to_completion();
  bool victim_was_scheduled_earlier_in_step = false;
  for (const auto& out : e.history) {
    if (!out.preempted.empty() && out.preempted[0] == 1u) victim_was_scheduled_earlier_in_step = true;
  }
  EXPECT_TRUE(victim_was_scheduled_earlier_in_step);
  for (const auto& out : e.history) {
    int64_t total = 0;
    for (const auto& s : out.scheduled) {
      total += s.num_scheduled_tokens;
      EXPECT_EQ(std::count(out.preempted.begin(), out.preempted.end(), s.request->id), 0)
          << "a preempted request must not stay scheduled in the same step";
    }
    EXPECT_EQ(total, out.num_scheduled_tokens);
  }
  EXPECT_EQ(e.finished.size(), 2u);
  EXPECT_EQ(e.kv.num_free_blocks(), 4);
}

TEST(Scheduler, RejectsRequestsThatCanNeverRun) {
  KVCacheManager kv(4, 16);  // 64 slots
  Scheduler s(config(512, 8, /*max_len=*/100), kv);
  auto expect_rejected = [&](int64_t prompt, int64_t max_tokens, const std::string& phrase) {
    try {
      s.add_request(make_request(1, prompt, max_tokens));
      FAIL() << "accepted prompt=" << prompt << " max_tokens=" << max_tokens;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  expect_rejected(100, 1, "context holds 100 tokens");
  expect_rejected(0, 1, "empty");
  expect_rejected(50, 60, "more than the context length");
  expect_rejected(50, 40, "needs 6 KV blocks but the whole cache has 4");
  expect_rejected(10, 0, "max_tokens must be at least 1");
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_NO_THROW(s.add_request(make_request(2, 30, 35)));  // 64 slots exactly
}

TEST(Scheduler, AbortMidPrefillFreesBlocksAtOnce) {
  FakeEngine e(64, 16, config(32, 8));
  e.scheduler.add_request(make_request(1, 200, 5));
  e.step();
  e.step();
  const Request* r = e.scheduler.find(1);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->num_computed_tokens, 64);
  EXPECT_GT(e.kv.num_used_blocks(), 0);
  e.scheduler.finish_request(1, FinishReason::Abort);
  EXPECT_EQ(e.kv.num_free_blocks(), 64);
  EXPECT_FALSE(e.scheduler.has_unfinished());
  auto finished = e.scheduler.take_finished();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0]->finish_reason, FinishReason::Abort);
  EXPECT_TRUE(e.scheduler.schedule().empty());
  e.scheduler.finish_request(1, FinishReason::Abort);  // unknown id now: ignored
}

TEST(Scheduler, AbortOfAWaitingRequest) {
  FakeEngine e(64, 16, config(32, 1));
  e.scheduler.add_request(make_request(1, 10, 5));
  e.scheduler.add_request(make_request(2, 10, 5));
  e.step();
  EXPECT_EQ(e.scheduler.num_waiting(), 1u);
  e.scheduler.finish_request(2, FinishReason::Abort);
  EXPECT_EQ(e.scheduler.num_waiting(), 0u);
  e.run_to_completion();
  EXPECT_EQ(e.kv.num_free_blocks(), 64);
}

TEST(Scheduler, EosFinishesWithStop) {
  FakeEngine e(64, 16, config(64, 8));
  e.scheduler.add_request(make_request(1, 5, 100));
  e.eos_after[1] = 3;
  e.run_to_completion();
  ASSERT_EQ(e.finished.count(1), 1u);
  EXPECT_EQ(e.finished[1]->finish_reason, FinishReason::Stop);
  EXPECT_EQ(e.finished[1]->num_output_tokens(), 3);
  EXPECT_EQ(e.finished[1]->tokens.back(), kEos);
}

// A multi-turn chat's next prompt is the previous prompt + reply + more: the finished request's
// blocks holding generated tokens must be found in the prefix cache too (as in vLLM), and the
// request reports what it found (num_cached_tokens), not what its first step computed.
TEST(Scheduler, PrefixCacheCoversGeneratedTokensOfFinishedRequests) {
  FakeEngine e(64, 4, config(64, 8), /*prefix_caching=*/true);
  e.scheduler.add_request(make_request(1, 10, 8));
  e.run_to_completion();
  ASSERT_EQ(e.finished.count(1), 1u);
  EXPECT_EQ(e.finished[1]->num_cached_tokens, 0);
  // 18 tokens, 17 computed (the last sampled token is never fed back): 4 full blocks, 6 of their
  // tokens generated.
  auto next = std::make_unique<Request>();
  next->id = 2;
  next->tokens = e.finished[1]->tokens;
  for (TokenId t : {1, 2, 3}) next->tokens.push_back(t);
  next->num_prompt_tokens = next->num_tokens();
  next->max_tokens = 4;
  next->stop_tokens = {kEos};
  e.scheduler.add_request(std::move(next));
  e.step();
  const Request* r = e.scheduler.find(2);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->num_cached_tokens, 16);
  EXPECT_EQ(r->num_computed_tokens, 21);
  e.run_to_completion();
  EXPECT_EQ(e.finished[2]->num_cached_tokens, 16);
  EXPECT_EQ(e.kv.num_free_blocks(), e.kv.num_blocks());
}

TEST(Scheduler, IgnoreEosKeepsGenerating) {
  FakeEngine e(64, 16, config(64, 8));
  auto r = make_request(1, 5, 6);
  r->ignore_eos = true;
  e.scheduler.add_request(std::move(r));
  e.eos_after[1] = 1;
  e.run_to_completion();
  EXPECT_EQ(e.finished[1]->num_output_tokens(), 6);
  EXPECT_EQ(e.finished[1]->finish_reason, FinishReason::Length);
}

TEST(Scheduler, LowerPriorityValueIsAdmittedFirstAndFcfsWithinAPriority) {
  FakeEngine e(64, 16, config(4096, 1));
  e.scheduler.add_request(make_request(1, 4, 1, 3));
  e.scheduler.add_request(make_request(2, 4, 1, 1));
  e.scheduler.add_request(make_request(3, 4, 1, 1));
  e.scheduler.add_request(make_request(4, 4, 1, 0));
  std::vector<RequestId> order;
  while (e.scheduler.has_unfinished()) {
    for (const auto& s : e.step().scheduled) order.push_back(s.request->id);
  }
  EXPECT_EQ(order, (std::vector<RequestId>{4, 2, 3, 1}));
}

TEST(Scheduler, StaticPolicyAdmitsOnlyIntoAnEmptyBatch) {
  SchedulerConfig c = config(4096, 2);
  c.policy = SchedulingPolicy::Static;
  FakeEngine e(64, 16, c);
  e.scheduler.add_request(make_request(1, 4, 2));
  e.scheduler.add_request(make_request(2, 4, 6));
  e.scheduler.add_request(make_request(3, 4, 2));
  e.step();
  e.step();  // request 1 finishes here; 2 still runs
  EXPECT_EQ(e.finished.count(1), 1u);
  const auto out = e.step();
  ASSERT_EQ(out.scheduled.size(), 1u) << "request 3 must wait for the whole batch";
  EXPECT_EQ(out.scheduled[0].request->id, 2u);
  e.run_to_completion();
  EXPECT_EQ(e.finished.size(), 3u);
}

TEST(Scheduler, ManyRandomRequestsNeverLeakOrStall) {
  FakeEngine e(40, 8, config(48, 6, 200));
  uint64_t state = 12345;
  auto next = [&](int64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return int64_t((state >> 33) % uint64_t(n));
  };
  RequestId id = 1;
  for (int round = 0; round < 300; ++round) {
    if (next(3) == 0) {
      const int64_t prompt = 1 + next(120);
      e.scheduler.add_request(make_request(id++, prompt, 1 + next(200 - prompt)));
    }
    if (next(10) == 0 && id > 1) e.scheduler.finish_request(RequestId(1 + next(int64_t(id - 1))), FinishReason::Abort);
    e.step();
    EXPECT_LE(e.history.back().num_scheduled_tokens, 48);
  }
  e.run_to_completion();
  EXPECT_EQ(e.kv.num_free_blocks(), 40);
  for (auto& [rid, r] : e.finished) {
    if (r->finish_reason == FinishReason::Length) {
      EXPECT_EQ(r->num_output_tokens(), r->max_tokens) << rid;
    }
  }
}

// Streaming (attention sinks over a rolling window of max_model_len): a request runs far past the
// context with a bounded pool; without streaming the same request is refused.
TEST(Scheduler, StreamingRunsPastTheContextWithBoundedBlocks) {
  SchedulerConfig config;
  config.max_model_len = 64;
  config.max_num_batched_tokens = 32;
  KVCacheManager plain(100, 16);
  EXPECT_NE(Scheduler(config, plain).check_capacity(100, 2000), "");
  config.streaming = true;
  KVCacheManager kv({{12, 64, 4}}, 16, false);
  Scheduler scheduler(config, kv);
  EXPECT_EQ(scheduler.check_capacity(100, 2000), "");
  scheduler.add_request(make_request(1, 100, 2000));
  int32_t most_used = 0;
  int64_t generated = 0;
  std::vector<std::unique_ptr<Request>> done;
  for (int step = 0; step < 5000 && scheduler.has_unfinished(); ++step) {
    const SchedulerOutput out = scheduler.schedule();
    ASSERT_FALSE(out.empty()) << "stalled at step " << step;
    std::vector<std::vector<TokenId>> sampled;
    for (const auto& sr : out.scheduled) {
      sampled.emplace_back();
      if (sr.samples()) {
        sampled.back().push_back(7);
        ++generated;
      }
    }
    scheduler.update_from_output(out, sampled);
    most_used = std::max(most_used, kv.num_used_blocks());
    for (auto& r : scheduler.take_finished()) done.push_back(std::move(r));
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->finish_reason, FinishReason::Length);
  EXPECT_EQ(done[0]->num_output_tokens(), 2000);
  EXPECT_EQ(generated, 2000);
  // 1 sink block + ceil(59/16) + 1 = 5 window blocks + ceil(32/16) + 1 = 3 chunk blocks.
  EXPECT_LE(most_used, 9);
  EXPECT_EQ(kv.num_free_blocks(), 12);
  EXPECT_EQ(scheduler.num_preemptions(), 0);
}

TEST(Scheduler, PromptScoringGetsARowPerPromptPositionWithoutTheCacheAndCappedChunks) {
  SchedulerConfig c = config(64, 8);
  c.max_prompt_logits = 12;
  FakeEngine e(64, 4, c, /*prefix_caching=*/true);
  e.scheduler.add_request(make_request(1, 30, 2));
  e.run_to_completion();  // the same prompt is now in the prefix cache
  auto scoring = make_request(2, 30, 2);
  scoring->prompt_logprobs = true;
  e.scheduler.add_request(std::move(scoring));
  int64_t rows = 0;
  std::vector<int64_t> chunks;
  for (int step = 0; step < 20 && e.scheduler.has_unfinished(); ++step) {
    const SchedulerOutput out = e.step();
    ASSERT_EQ(out.scheduled.size(), 1u);
    const ScheduledRequest& s = out.scheduled[0];
    if (chunks.empty()) EXPECT_EQ(s.num_computed_tokens, 0);  // no prefix-cache reuse
    // Prompt rows cover the chunk's positions before the prompt's last one, in order.
    EXPECT_EQ(s.num_prompt_logits,
              std::max<int64_t>(0, std::min<int64_t>(s.num_computed_tokens + s.num_scheduled_tokens, 29) -
                                       s.num_computed_tokens));
    if (s.num_computed_tokens < 29) EXPECT_EQ(s.num_computed_tokens, rows);  // no gap, no repeat
    rows += s.num_prompt_logits;
    chunks.push_back(s.num_scheduled_tokens);
  }
  EXPECT_EQ(rows, 29);  // every prompt token after the first, each predicted once
  // Prefill chunks capped at 12 rows while prompt positions remain: 12 + 12 + 6, then a decode.
  EXPECT_EQ(chunks, (std::vector<int64_t>{12, 12, 6, 1}));
  EXPECT_EQ(e.finished[2]->num_cached_tokens, 0);
}

}  // namespace
}  // namespace kestrel