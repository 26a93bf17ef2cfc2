// Automatic prefix caching in the KV cache manager: hits, partial hits, reference sharing,
// eviction order, and safety against hash collisions (forced with a degenerate hash function).
#include <gtest/gtest.h>

#include <numeric>

#include "kv/kv_cache_manager.h"
#include "kv/prefix_cache.h"

namespace kestrel {
namespace {

constexpr int kBlock = 4;

std::vector<int32_t> tokens_of(std::initializer_list<int32_t> values) { return values; }

std::vector<int32_t> range_tokens(int32_t first, int32_t count) {
  std::vector<int32_t> t(static_cast<size_t>(count));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Admits `tokens` as a request the way the scheduler does and marks all but the last token
// computed. Returns the number of tokens served from the cache.
int64_t admit_and_compute(KVCacheManager& kv, RequestId id, const std::vector<int32_t>& tokens) {
  const CachedPrefix prefix =
      kv.find_cached_prefix(std::span<const int32_t>(tokens).first(tokens.size() - 1));
  EXPECT_TRUE(kv.allocate_slots(id, int64_t(tokens.size()), &prefix));
  kv.cache_computed_blocks(id, tokens, int64_t(tokens.size()));
  return prefix.num_tokens;
}

TEST(PrefixCache, SecondRequestWithSamePromptReusesEveryFullBlockButTheLastToken) {
  KVCacheManager kv(16, kBlock, /*enable_prefix_caching=*/true);
  const auto prompt = range_tokens(10, 12);  // 3 full blocks
  EXPECT_EQ(admit_and_compute(kv, 1, prompt), 0);
  // At most 11 tokens may come from the cache, so only 2 whole blocks: the third is recomputed.
  EXPECT_EQ(admit_and_compute(kv, 2, prompt), 8);
  const auto& a = kv.block_table(1);
  const auto& b = kv.block_table(2);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_EQ(a[1], b[1]);
  EXPECT_NE(a[2], b[2]);
  EXPECT_EQ(kv.pool().ref_count(a[0]), 2);
  EXPECT_EQ(kv.pool().ref_count(a[2]), 1);
  EXPECT_EQ(kv.num_used_blocks(), 4);
}

TEST(PrefixCache, PartialHitStopsAtTheFirstDifferentBlock) {
  KVCacheManager kv(16, kBlock, true);
  auto first = range_tokens(0, 13);
  admit_and_compute(kv, 1, first);
  auto second = first;
  second[9] = 999;  // third block differs
  EXPECT_EQ(admit_and_compute(kv, 2, second), 8);
  auto third = first;
  third[1] = 999;  // first block differs: nothing reusable
  EXPECT_EQ(admit_and_compute(kv, 3, third), 0);
}

TEST(PrefixCache, FreedBlocksStayReusableUntilEvicted) {
  KVCacheManager kv(6, kBlock, true);
  const auto prompt = range_tokens(0, 9);  // 2 full blocks + 1 token
  admit_and_compute(kv, 1, prompt);
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  EXPECT_EQ(admit_and_compute(kv, 2, prompt), 8) << "a freed cached block is taken back";
  EXPECT_EQ(kv.num_free_blocks(), 3);
}

TEST(PrefixCache, EvictionTakesLeastRecentlyFreedAndRequestTailsFirst) {
  KVCacheManager kv(6, kBlock, true);
  const auto a = range_tokens(0, 9);
  const auto b = range_tokens(100, 9);
  admit_and_compute(kv, 1, a);  // 3 blocks
  admit_and_compute(kv, 2, b);  // 3 blocks
  kv.free(1);
  kv.free(2);
  // Free queue now: a's blocks tail first (a2, a1, a0), then b's (b2, b1, b0). A request needing
  // 4 fresh blocks evicts a2, a1, a0 and b2: a's prefix is gone, b's two full blocks survive.
  ASSERT_TRUE(kv.allocate_slots(3, 16));
  EXPECT_EQ(kv.find_cached_prefix(std::span<const int32_t>(a).first(8)).num_tokens, 0);
  EXPECT_EQ(kv.find_cached_prefix(std::span<const int32_t>(b).first(8)).num_tokens, 8);
}

TEST(PrefixCache, ForcedHashCollisionsNeverReturnWrongBlocks) {
  // Every block hashes to the same value: only confirmation keeps content apart.
  KVCacheManager kv(32, kBlock, true, [](uint64_t, std::span<const int32_t>) { return uint64_t(42); });
  const auto a = tokens_of({1, 2, 3, 4, 5, 6, 7, 8, 9});
  admit_and_compute(kv, 1, a);
  // Same second block, different first block: a naive "same hash and same block tokens" check
  // would return a's second block here.
  const auto b = tokens_of({9, 9, 9, 9, 5, 6, 7, 8, 9});
  EXPECT_EQ(kv.find_cached_prefix(std::span<const int32_t>(b).first(8)).num_tokens, 0);
  // Same tokens as a: the first block hits (its hash slot is a's first block).
  EXPECT_EQ(kv.find_cached_prefix(std::span<const int32_t>(a).first(8)).num_tokens, 4);
}

TEST(PrefixCache, ReusedParentInvalidatesCachedChildren) {
  // A hash that depends only on depth, so every lookup is decided by confirmation. Block 0 holds
  // A0 and block 1 holds its child A1. Block 0 is then reused for X0 = A1's tokens; the chain
  // X0, X1 (X1 = A1's tokens again) must not find A1: its parent slot holds other content now.
  PrefixCache cache(4, [](uint64_t parent, std::span<const int32_t>) { return parent + 1; });
  const auto a0 = tokens_of({1, 2, 3, 4});
  const auto a1 = tokens_of({5, 6, 7, 8});
  const uint64_t h1 = cache.chain_hash(PrefixCache::kRootHash, a0);
  const uint64_t h2 = cache.chain_hash(h1, a1);
  ASSERT_TRUE(cache.insert(0, h1, -1, a0));
  ASSERT_TRUE(cache.insert(1, h2, 0, a1));
  EXPECT_EQ(cache.lookup(h2, 0, a1), 1) << "the intact chain is found";
  cache.forget(0);
  ASSERT_TRUE(cache.insert(0, h1, -1, a1));  // block 0 now holds X0 = {5, 6, 7, 8}
  EXPECT_EQ(cache.lookup(h1, -1, a1), 0);
  EXPECT_EQ(cache.lookup(h2, 0, a1), -1) << "A1's parent content changed: A1 must not be returned";
}

TEST(PrefixCache, HitOnABlockInTheFreeQueueCountsAgainstAvailability) {
  KVCacheManager kv(4, kBlock, true);
  const auto a = range_tokens(0, 9);  // 3 blocks, 2 cached
  admit_and_compute(kv, 1, a);
  kv.free(1);
  // A new request with a's prefix needs 2 cached blocks + 3 fresh = 5 blocks: only 4 exist.
  auto longer = range_tokens(0, 20);
  const CachedPrefix p = kv.find_cached_prefix(std::span<const int32_t>(longer).first(19));
  EXPECT_EQ(p.num_tokens, 8);
  EXPECT_FALSE(kv.allocate_slots(7, 20, &p));
  EXPECT_EQ(kv.num_free_blocks(), 4) << "a failed allocation takes nothing";
  EXPECT_TRUE(kv.block_table(7).empty());
}

TEST(PrefixCache, DisabledCacheNeverHits) {
  KVCacheManager kv(16, kBlock, false);
  const auto prompt = range_tokens(0, 12);
  admit_and_compute(kv, 1, prompt);
  EXPECT_EQ(admit_and_compute(kv, 2, prompt), 0);
  EXPECT_EQ(kv.num_cached_blocks(), 0);
}

TEST(PrefixCache, DuplicateContentComputedTwiceStaysPrivate) {
  KVCacheManager kv(16, kBlock, true);
  const auto prompt = range_tokens(0, 9);
  // Both admitted before either is computed: both compute the same blocks.
  const CachedPrefix none;
  ASSERT_TRUE(kv.allocate_slots(1, 9, &none));
  ASSERT_TRUE(kv.allocate_slots(2, 9, &none));
  kv.cache_computed_blocks(1, prompt, 9);
  kv.cache_computed_blocks(2, prompt, 9);
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), 16);
  EXPECT_EQ(admit_and_compute(kv, 3, prompt), 8);
}

// Sliding-window layers whose blocks are kept (a chat engine does this) form a second
// full-attention group with its own pool: a hit must hand out each group's own blocks, or that
// group's layers would read K/V nobody computed.
TEST(PrefixCache, SeveralFullAttentionGroupsEachReuseTheirOwnBlocks) {
  KVCacheManager kv({{8, 0}, {12, 0}}, kBlock, /*enable_prefix_caching=*/true);
  ASSERT_TRUE(kv.prefix_caching());
  const auto prompt = range_tokens(0, 10);
  EXPECT_EQ(admit_and_compute(kv, 1, prompt), 0);
  const std::vector<BlockId> first0 = kv.block_table(1, 0);
  const std::vector<BlockId> first1 = kv.block_table(1, 1);
  kv.free(1);
  EXPECT_EQ(admit_and_compute(kv, 2, prompt), 8);
  for (size_t b = 0; b < 2; ++b) {
    EXPECT_EQ(kv.block_table(2, 0)[b], first0[b]);
    EXPECT_EQ(kv.block_table(2, 1)[b], first1[b]);
  }
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), 20);
  // A block evicted from one group only ends the reusable prefix there too: take every free
  // block of group 1 (evicting its cached ones), via a request of group-1-sized demand.
  KVCacheManager small({{8, 0}, {3, 0}}, kBlock, true);
  EXPECT_EQ(admit_and_compute(small, 1, prompt), 0);
  small.free(1);
  const CachedPrefix none;
  ASSERT_TRUE(small.allocate_slots(2, 12, &none));  // 3 blocks: all of group 1's pool
  small.free(2);
  EXPECT_EQ(small.find_cached_prefix(std::span<const int32_t>(prompt).first(9)).num_tokens, 0);
}

}  // namespace
}  // namespace kestrel
