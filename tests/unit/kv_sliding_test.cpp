// KV-cache groups with a sliding window: blocks that fall out of the window are freed as a request
// advances, so a sliding group holds about window / block_size + 1 blocks however long the
// request runs, while the full-attention group keeps everything. A rolling window with attention
// sinks also keeps the blocks of its first positions.
#include <gtest/gtest.h>

#include "kv/kv_cache_manager.h"

namespace kestrel {
namespace {

int64_t held(const std::vector<BlockId>& table) {
  int64_t n = 0;
  for (BlockId b : table) n += b >= 0 ? 1 : 0;
  return n;
}

TEST(KvSlidingWindow, DecodingFarPastTheWindowKeepsTheSlidingGroupBounded) {
  constexpr int kBlock = 16, kWindow = 40;
  KVCacheManager kv({{100, 0}, {100, kWindow}}, kBlock, /*enable_prefix_caching=*/false);
  // Prefill 20 tokens, then decode one token at a time up to 900 tokens.
  ASSERT_TRUE(kv.allocate_slots(1, 20, nullptr, 0));
  int64_t max_held = 0;
  for (int64_t computed = 20; computed < 900; ++computed) {
    ASSERT_TRUE(kv.allocate_slots(1, computed + 1, nullptr, computed)) << computed;
    const auto& sliding = kv.block_table(1, 1);
    max_held = std::max(max_held, held(sliding));
    // Every position the next token can see is still held.
    for (int64_t p = std::max<int64_t>(0, computed - kWindow + 1); p <= computed; ++p) {
      ASSERT_GE(sliding[size_t(p / kBlock)], 0) << "position " << p << " at " << computed;
    }
  }
  // ceil((40 - 1) / 16) + 1 = 4 blocks cover any 40 consecutive positions.
  EXPECT_LE(max_held, 4);
  EXPECT_EQ(held(kv.block_table(1, 0)), (900 + kBlock - 1) / kBlock);
  EXPECT_EQ(kv.num_free_blocks(1), 100 - held(kv.block_table(1, 1)));
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 200);
}

TEST(KvSlidingWindow, CapacityCountsTheWindowNotTheLength) {
  KVCacheManager kv({{8, 32}}, 16, false);  // a sliding-only model (Mistral-like)
  // 10,000 tokens decoded one by one need ceil(31/16) + 1 + 1 + 1 = 5 blocks at most.
  EXPECT_EQ(kv.max_blocks_held(0, 10000, 1), 5);
  EXPECT_EQ(kv.check_fits(10000, 1), "");
  // Prefilled in chunks of 64 tokens it needs the window plus a chunk: 2 + 1 + 4 + 1 = 8.
  EXPECT_EQ(kv.check_fits(10000, 64), "");
  EXPECT_NE(kv.check_fits(10000, 128), "");
  // And it really runs in 8 blocks.
  int64_t computed = 0;
  while (computed < 10000) {
    const int64_t chunk = std::min<int64_t>(64, 10000 - computed);
    ASSERT_TRUE(kv.allocate_slots(7, computed + chunk, nullptr, computed)) << computed;
    computed += chunk;
  }
  kv.free(7);
  EXPECT_EQ(kv.num_free_blocks(), 8);
}

TEST(KvSlidingWindow, FailureTakesNothingInAnyGroup) {
  KVCacheManager kv({{4, 0}, {100, 16}}, 16, false);
  ASSERT_TRUE(kv.allocate_slots(1, 64, nullptr, 0));  // full group: all 4 blocks
  EXPECT_FALSE(kv.allocate_slots(2, 16, nullptr, 0));
  EXPECT_TRUE(kv.block_table(2, 0).empty());
  EXPECT_TRUE(kv.block_table(2, 1).empty());
  EXPECT_EQ(kv.num_free_blocks(1), 100 - 4);
}

TEST(KvSlidingWindow, PrefixCachingIsOffWhenAGroupSlides) {
  KVCacheManager kv({{10, 0}, {10, 16}}, 16, /*enable_prefix_caching=*/true);
  EXPECT_FALSE(kv.prefix_caching());
}

// A rolling window of 64 with 20 sinks over blocks of 16: the sinks' two blocks stay for the whole
// run, the blocks between them and the window are freed, and the held count stays bounded.
TEST(KvAttentionSinks, SinkBlocksStayAndTheGapIsFreed) {
  constexpr int kBlock = 16, kWindow = 64, kSinks = 20;
  KVCacheManager kv({{40, kWindow, kSinks}}, kBlock, false);
  ASSERT_TRUE(kv.allocate_slots(1, 30, nullptr, 0));
  int64_t max_held = 0;
  for (int64_t computed = 30; computed < 2000; ++computed) {
    ASSERT_TRUE(kv.allocate_slots(1, computed + 1, nullptr, computed)) << computed;
    const auto& table = kv.block_table(1, 0);
    max_held = std::max(max_held, held(table));
    // The sinks and every recent position the next token sees are held.
    for (int64_t p = 0; p < kSinks; ++p) ASSERT_GE(table[size_t(p / kBlock)], 0) << "sink " << p;
    const int64_t recent = std::max<int64_t>(kSinks, computed - (kWindow - kSinks) + 1);
    for (int64_t p = recent; p <= computed; ++p) ASSERT_GE(table[size_t(p / kBlock)], 0) << p << " at " << computed;
    // Blocks wholly between the sinks and the window are gone.
    for (int64_t b = 2; b < recent / kBlock; ++b) ASSERT_EQ(table[size_t(b)], -1) << "block " << b << " at " << computed;
  }
  // 2 sink blocks + ceil(43 / 16) + 1 = 4 window blocks + the one being filled.
  EXPECT_LE(max_held, 2 + 4 + 1);
  EXPECT_EQ(kv.max_blocks_held(0, 100000, 1), 2 + 3 + 1 + 1 + 1);
  EXPECT_EQ(kv.check_fits(100000, 1), "");
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 40);
}

// Chunked prefill of a prompt many windows long: each chunk's blocks before the window (but the
// sinks') are freed before the next is allocated, so the pool needs a window plus a chunk.
TEST(KvAttentionSinks, LongPromptInChunksFitsTheWindowAndAChunk) {
  KVCacheManager kv({{12, 48, 4}}, 16, false);
  // 1 sink block + ceil(43/16)+1 = 4 window blocks + ceil(64/16)+1 = 5 chunk blocks = 10 <= 12.
  EXPECT_EQ(kv.max_blocks_held(0, 5000, 64), 10);
  EXPECT_EQ(kv.check_fits(5000, 64), "");
  int64_t computed = 0;
  while (computed < 5000) {
    const int64_t chunk = std::min<int64_t>(64, 5000 - computed);
    ASSERT_TRUE(kv.allocate_slots(3, computed + chunk, nullptr, computed)) << computed;
    EXPECT_GE(kv.block_table(3, 0)[0], 0) << "the sink block was freed at " << computed;
    computed += chunk;
  }
  kv.free(3);
  EXPECT_EQ(kv.num_free_blocks(), 12);
}

}  // namespace
}  // namespace kestrel
