#include "kv/block_pool.h"

#include "core/error.h"

namespace kestrel {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_count_(size_t(num_blocks), 0), prev_(size_t(num_blocks), -1), next_(size_t(num_blocks), -1) {
  if (num_blocks <= 0) fail("the KV block pool needs at least one block, got {}", num_blocks);
  for (BlockId b = 0; b < num_blocks; ++b) push_back(b);
}

std::vector<BlockId> BlockPool::allocate(int32_t count) {
  std::vector<BlockId> blocks;
  if (count < 0 || count > num_free_) return blocks;
  blocks.reserve(size_t(count));
  for (int32_t i = 0; i < count; ++i) {
    const BlockId block = head_;
    unlink(block);
    ref_count_[size_t(block)] = 1;
    blocks.push_back(block);
  }
  return blocks;
}

void BlockPool::add_ref(BlockId block) {
  if (block < 0 || block >= num_blocks()) fail("internal: block id {} out of range", block);
  if (ref_count_[size_t(block)]++ == 0) unlink(block);
}

void BlockPool::release(BlockId block) {
  if (block < 0 || block >= num_blocks()) fail("internal: block id {} out of range", block);
  if (ref_count_[size_t(block)] <= 0) fail("internal: block {} released while free", block);
  if (--ref_count_[size_t(block)] == 0) push_back(block);
}

void BlockPool::unlink(BlockId block) {
  const BlockId p = prev_[size_t(block)];
  const BlockId n = next_[size_t(block)];
  if (p >= 0) next_[size_t(p)] = n; else head_ = n;
  if (n >= 0) prev_[size_t(n)] = p; else tail_ = p;
  prev_[size_t(block)] = next_[size_t(block)] = -1;
  --num_free_;
}

void BlockPool::push_back(BlockId block) {
  prev_[size_t(block)] = tail_;
  next_[size_t(block)] = -1;
  if (tail_ >= 0) next_[size_t(tail_)] = block; else head_ = block;
  tail_ = block;
  ++num_free_;
}

}  // namespace kestrel
