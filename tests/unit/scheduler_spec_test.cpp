// The multi-token step protocol without a model: drafts are scheduled as lookahead slots inside
// the token budget, update_from_output appends the accepted tokens and rolls the rejected ones
// back (num_computed_tokens, blocks past the end) before anything is hashed into the prefix
// cache, stop tokens inside an accepted run end the request there, and drafts never preempt.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "sched/scheduler.h"

namespace kestrel {
namespace {

constexpr TokenId kEos = 2;
constexpr int kBlock = 16;

SchedulerConfig config(int64_t budget, int max_seqs = 8, int64_t max_len = 4096) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.max_model_len = max_len;
  return c;
}

std::unique_ptr<Request> make_request(RequestId id, int64_t prompt_len, int64_t max_tokens, TokenId base = 100) {
  auto r = std::make_unique<Request>();
  r->id = id;
  for (int64_t i = 0; i < prompt_len; ++i) r->tokens.push_back(TokenId(base + i));
  r->num_prompt_tokens = prompt_len;
  r->max_tokens = max_tokens;
  r->stop_tokens = {kEos};
  return r;
}

// Runs the prompt's prefill (one step) and returns the request, now ready to decode.
Request* prefill(Scheduler& s, RequestId id, TokenId first_output = 7) {
  const SchedulerOutput out = s.schedule();
  std::vector<std::vector<TokenId>> produced(out.scheduled.size());
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    if (out.scheduled[i].samples()) produced[i] = {first_output};
  }
  s.update_from_output(out, produced);
  Request* r = nullptr;
  for (Request* running : s.running()) {
    if (running->id == id) r = running;
  }
  return r;
}

TEST(SchedulerSpec, DraftsAreLookaheadSlotsWithOneLogitsRowEach) {
  KVCacheManager kv(64, kBlock);
  Scheduler s(config(64), kv);
  s.add_request(make_request(1, 10, 50));
  Request* r = prefill(s, 1);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->num_tokens(), 11);
  EXPECT_EQ(r->num_computed_tokens, 10);
  r->draft_tokens = {20, 21, 22, 23, 24, 25, 26, 27};
  const SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  const ScheduledRequest& sr = out.scheduled[0];
  EXPECT_EQ(sr.num_computed_tokens, 10);
  EXPECT_EQ(sr.num_scheduled_tokens, 9);  // the last token and 8 drafts
  EXPECT_EQ(sr.num_draft_tokens, 8);
  EXPECT_EQ(sr.num_logits, 9);
  EXPECT_EQ(out.num_scheduled_tokens, 9);
  // Slots for positions 0..18: two blocks.
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  EXPECT_EQ(kv.num_free_blocks(), 62);
}

TEST(SchedulerSpec, RejectedDraftsAreRolledBackAndTheirBlockFreed) {
  KVCacheManager kv(64, kBlock);
  Scheduler s(config(64), kv);
  s.add_request(make_request(1, 10, 50));
  Request* r = prefill(s, 1);
  r->draft_tokens = {20, 21, 22, 23, 24, 25, 26, 27};
  const SchedulerOutput out = s.schedule();
  EXPECT_EQ(kv.num_free_blocks(), 62);
  // Draft 1 accepted, draft 2 rejected: the target's own token 99 follows.
  s.update_from_output(out, std::vector<std::vector<TokenId>>{{20, 99}});
  EXPECT_EQ(r->num_tokens(), 13);
  EXPECT_EQ(r->tokens[11], 20);
  EXPECT_EQ(r->tokens[12], 99);
  EXPECT_EQ(r->num_computed_tokens, 12);  // the accepted draft's K/V stays; 99 is computed next
  EXPECT_TRUE(r->draft_tokens.empty());
  EXPECT_EQ(r->num_draft_tokens, 8);
  EXPECT_EQ(r->num_accepted_tokens, 1);
  // Positions 13..18 were lookahead only: the second block goes back to the pool.
  EXPECT_EQ(kv.block_table(1).size(), 1u);
  EXPECT_EQ(kv.num_free_blocks(), 63);
}

TEST(SchedulerSpec, AllDraftsAcceptedAddsKPlusOneTokens) {
  KVCacheManager kv(64, kBlock);
  Scheduler s(config(64), kv);
  s.add_request(make_request(1, 10, 50));
  Request* r = prefill(s, 1);
  r->draft_tokens = {20, 21, 22};
  const SchedulerOutput out = s.schedule();
  s.update_from_output(out, std::vector<std::vector<TokenId>>{{20, 21, 22, 30}});
  EXPECT_EQ(r->num_tokens(), 15);
  EXPECT_EQ(r->num_computed_tokens, 14);
  EXPECT_EQ(r->num_output_tokens(), 5);
}

TEST(SchedulerSpec, AProducedTokenThatIsNotTheDraftIsAnInternalError) {
  KVCacheManager kv(64, kBlock);
  Scheduler s(config(64), kv);
  s.add_request(make_request(1, 10, 50));
  Request* r = prefill(s, 1);
  r->draft_tokens = {20, 21};
  const SchedulerOutput out = s.schedule();
  EXPECT_THROW(s.update_from_output(out, std::vector<std::vector<TokenId>>{{21, 22, 23}}), Error);
}

TEST(SchedulerSpec, ThePrefixCacheNeverHoldsARejectedToken) {
  KVCacheManager kv(64, kBlock, /*enable_prefix_caching=*/true);
  Scheduler s(config(64), kv);
  s.add_request(make_request(1, 10, 50));
  Request* r = prefill(s, 1);  // tokens 100..109, 7
  // Drafts that would fill the first block and more; all rejected.
  r->draft_tokens = {40, 41, 42, 43, 44, 45, 46, 47, 48};
  SchedulerOutput out = s.schedule();
  s.update_from_output(out, std::vector<std::vector<TokenId>>{{55}});
  EXPECT_EQ(kv.num_cached_blocks(), 0);
  std::vector<TokenId> rejected_seq(r->tokens.begin(), r->tokens.begin() + 11);
  rejected_seq.insert(rejected_seq.end(), {40, 41, 42, 43, 44, 45, 46, 47, 48});
  EXPECT_EQ(kv.find_cached_prefix(rejected_seq).num_tokens, 0);

  // Now the accepted run completes the first block: it is cached with the accepted tokens only.
  r->draft_tokens = {60, 61, 62, 63, 64, 65};
  out = s.schedule();
  s.update_from_output(out, std::vector<std::vector<TokenId>>{{60, 61, 62, 63, 64, 70}});
  EXPECT_EQ(r->num_computed_tokens, 17);
  EXPECT_EQ(kv.num_cached_blocks(), 1);
  std::vector<TokenId> accepted_seq(r->tokens.begin(), r->tokens.begin() + 17);
  EXPECT_EQ(kv.find_cached_prefix(accepted_seq).num_tokens, kBlock);
  std::vector<TokenId> with_rejected = rejected_seq;
  with_rejected.resize(size_t(kBlock) + 1);
  EXPECT_EQ(kv.find_cached_prefix(with_rejected).num_tokens, 0);
}

TEST(SchedulerSpec, AStopTokenInsideAnAcceptedRunEndsTheRequestThere) {
  KVCacheManager kv(64, kBlock);
  Scheduler s(config(64), kv);
  s.add_request(make_request(1, 10, 50));
  Request* r = prefill(s, 1);
  r->draft_tokens = {20, kEos, 22, 23};
  const SchedulerOutput out = s.schedule();
  s.update_from_output(out, std::vector<std::vector<TokenId>>{{20, kEos, 22, 23, 24}});
  auto finished = s.take_finished();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0]->finish_reason, FinishReason::Stop);
  EXPECT_EQ(finished[0]->tokens, (std::vector<TokenId>{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 7, 20, kEos}));
  EXPECT_EQ(kv.num_free_blocks(), 64);
}

TEST(SchedulerSpec, DraftsNeverOvershootMaxTokensOrTheContext) {
  KVCacheManager kv(64, kBlock);
  Scheduler s(config(64), kv);
  s.add_request(make_request(1, 10, 4));
  Request* r = prefill(s, 1);  // 1 output so far: 3 more allowed, so at most 2 drafts
  r->draft_tokens = {20, 21, 22, 23, 24};
  SchedulerOutput out = s.schedule();
  EXPECT_EQ(out.scheduled[0].num_draft_tokens, 2);
  s.update_from_output(out, std::vector<std::vector<TokenId>>{{20, 21, 30}});
  auto finished = s.take_finished();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0]->num_output_tokens(), 4);
  EXPECT_EQ(finished[0]->finish_reason, FinishReason::Length);

  // Context of 16: prompt 12 + 1 output = 13 tokens; at most 16 - 13 - 1 = 2 drafts.
  Scheduler small(config(64, 8, 16), kv);
  small.add_request(make_request(2, 12, 4));
  Request* q = prefill(small, 2);
  q->draft_tokens = {20, 21, 22};
  out = small.schedule();
  EXPECT_EQ(out.scheduled[0].num_draft_tokens, 2);
}

TEST(SchedulerSpec, TheTokenBudgetCountsDrafts) {
  KVCacheManager kv(64, kBlock);
  Scheduler s(config(6), kv);
  s.add_request(make_request(1, 5, 50));
  Request* r = prefill(s, 1);
  s.add_request(make_request(2, 40, 50, 300));
  r->draft_tokens = {20, 21, 22, 23, 24, 25, 26, 27};
  const SchedulerOutput out = s.schedule();
  // 1 + 5 drafts fill the budget of 6; the new prompt waits.
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_draft_tokens, 5);
  EXPECT_EQ(out.num_scheduled_tokens, 6);
}

TEST(SchedulerSpec, DraftsAreDroppedRatherThanPreemptingAnyone) {
  // Three blocks: after the prefills each request holds one (positions 0..15), one is free.
  KVCacheManager kv(3, kBlock);
  Scheduler s(config(64), kv);
  s.add_request(make_request(1, 14, 10));
  s.add_request(make_request(2, 14, 10, 300));
  SchedulerOutput out = s.schedule();
  s.update_from_output(out, std::vector<std::vector<TokenId>>{{7}, {8}});
  ASSERT_EQ(kv.num_free_blocks(), 1);
  Request* first = s.running()[0];
  Request* second = s.running()[1];
  // Each asks for 8 lookahead slots (positions 15..22: a second block). The first gets the free
  // block; the second's drafts are dropped and nobody is preempted.
  first->draft_tokens.assign(8, 20);
  second->draft_tokens.assign(8, 21);
  out = s.schedule();
  EXPECT_TRUE(out.preempted.empty());
  ASSERT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(out.scheduled[0].num_draft_tokens, 8);
  EXPECT_EQ(out.scheduled[1].num_draft_tokens, 0);
  EXPECT_EQ(out.scheduled[1].num_logits, 1);
  EXPECT_TRUE(second->draft_tokens.empty());
  EXPECT_EQ(kv.num_free_blocks(), 0);
}

TEST(SchedulerSpec, CapacityCountsTheLookaheadSlots) {
  // 3 blocks of 16 = 48 slots. A prompt of 30 with max_tokens 18 needs 47 slots and fits; drafts
  // are capped so the lookahead never goes past prompt + max_tokens - 1.
  KVCacheManager kv(3, kBlock);
  Scheduler s(config(64), kv);
  EXPECT_EQ(s.check_capacity(30, 18), "");
  EXPECT_NE(s.check_capacity(30, 20), "");
  s.add_request(make_request(1, 30, 18));
  Request* r = prefill(s, 1);
  for (int step = 0; step < 20 && !s.running().empty(); ++step) {
    r->draft_tokens.assign(8, 50);
    const SchedulerOutput out = s.schedule();
    ASSERT_EQ(out.scheduled.size(), 1u);
    const ScheduledRequest& sr = out.scheduled[0];
    EXPECT_LE(sr.num_computed_tokens + sr.num_scheduled_tokens, 30 + 18 - 1);
    std::vector<TokenId> produced(size_t(sr.num_draft_tokens), 50);
    produced.push_back(51);
    s.update_from_output(out, std::vector<std::vector<TokenId>>{produced});
    r = s.running().empty() ? nullptr : s.running()[0];
  }
  auto finished = s.take_finished();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0]->num_output_tokens(), 18);
  EXPECT_EQ(kv.num_free_blocks(), 3);
}

}  // namespace
}  // namespace kestrel
