// BlockPool and KVCacheManager: allocation, reference counts, free-queue (eviction) order.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "kv/block_pool.h"
#include "kv/kv_cache_manager.h"

namespace kestrel {
namespace {

TEST(BlockPool, AllocatesDistinctBlocksUntilEmpty) {
  BlockPool pool(8);
  EXPECT_EQ(pool.num_free(), 8);
  const auto a = pool.allocate(5);
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_TRUE(pool.allocate(4).empty()) << "must not hand out more than are free";
  EXPECT_EQ(pool.num_free(), 3) << "a failed allocation takes nothing";
  const auto b = pool.allocate(3);
  std::set<BlockId> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 8u);
  EXPECT_EQ(pool.num_free(), 0);
  for (BlockId id : all) EXPECT_EQ(pool.ref_count(id), 1);
}

TEST(BlockPool, ReferenceCountsKeepSharedBlocksAlive) {
  BlockPool pool(4);
  const BlockId block = pool.allocate(1)[0];
  pool.add_ref(block);
  EXPECT_EQ(pool.ref_count(block), 2);
  pool.release(block);
  EXPECT_FALSE(pool.is_free(block));
  EXPECT_EQ(pool.num_free(), 3);
  pool.release(block);
  EXPECT_TRUE(pool.is_free(block));
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_THROW(pool.release(block), Error) << "double free must be caught";
}

TEST(BlockPool, FreedBlocksAreReusedInLeastRecentlyFreedOrder) {
  BlockPool pool(4);
  const auto blocks = pool.allocate(4);
  pool.release(blocks[2]);
  pool.release(blocks[0]);
  pool.release(blocks[3]);
  EXPECT_EQ(pool.peek_free(), blocks[2]);
  EXPECT_EQ(pool.allocate(1)[0], blocks[2]);
  EXPECT_EQ(pool.allocate(1)[0], blocks[0]);
  EXPECT_EQ(pool.allocate(1)[0], blocks[3]);
}

TEST(BlockPool, AddRefOnFreeBlockTakesItOutOfTheMiddleOfTheQueue) {
  BlockPool pool(3);
  const auto blocks = pool.allocate(3);
  for (BlockId b : blocks) pool.release(b);
  pool.add_ref(blocks[1]);  // reuse a cached free block in place
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.allocate(1)[0], blocks[0]);
  EXPECT_EQ(pool.allocate(1)[0], blocks[2]);
  EXPECT_TRUE(pool.allocate(1).empty());
}

TEST(BlockPool, RejectsEmptyPool) { EXPECT_THROW(BlockPool(0), Error); }

TEST(KVCacheManager, AllocatesBlocksAsTokensGrow) {
  KVCacheManager kv(10, 16);
  EXPECT_TRUE(kv.allocate_slots(1, 1));
  EXPECT_EQ(kv.block_table(1).size(), 1u);
  EXPECT_TRUE(kv.allocate_slots(1, 16));
  EXPECT_EQ(kv.block_table(1).size(), 1u);
  EXPECT_TRUE(kv.allocate_slots(1, 17));
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  EXPECT_TRUE(kv.allocate_slots(2, 16 * 8));
  EXPECT_EQ(kv.num_free_blocks(), 0);
  EXPECT_FALSE(kv.allocate_slots(3, 1));
  EXPECT_TRUE(kv.block_table(3).empty());
  EXPECT_FALSE(kv.allocate_slots(1, 33)) << "needs a third block, none free";
  EXPECT_EQ(kv.block_table(1).size(), 2u) << "a failed growth keeps what was held";
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), 8);
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 10);
  kv.free(1);  // freeing twice is harmless
  EXPECT_EQ(kv.num_free_blocks(), 10);
}

TEST(KVCacheManager, FreesTailBlocksFirst) {
  KVCacheManager kv(4, 4);
  ASSERT_TRUE(kv.allocate_slots(7, 16));
  const auto table = kv.block_table(7);
  kv.free(7);
  // The request's last block is the first to be reused.
  EXPECT_EQ(kv.pool().peek_free(), table.back());
}

}  // namespace
}  // namespace kestrel
