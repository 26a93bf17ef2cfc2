// BlockPool: the allocator of KV-cache blocks. It knows block ids and reference counts, never the
// K/V memory itself (that lives with the runner), so it is tested without a model.
//
// Free blocks wait in a queue kept in eviction order (least recently freed first). A block is
// handed out from the front; a freed block goes to the back. Prefix caching builds on this: a
// freed block keeps its contents until it reaches the front and is reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kestrel {

using BlockId = int32_t;

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return int32_t(ref_count_.size()); }
  int32_t num_free() const { return num_free_; }
  int32_t num_used() const { return num_blocks() - num_free_; }
  int32_t ref_count(BlockId block) const { return ref_count_.at(size_t(block)); }
  bool is_free(BlockId block) const { return ref_count(block) == 0; }

  // Takes `count` blocks from the front of the free queue, each with ref count 1. Returns an
  // empty vector (and takes nothing) if fewer than `count` are free.
  std::vector<BlockId> allocate(int32_t count);
  // Adds a reference to a block; a free block is taken out of the free queue (reused as is).
  void add_ref(BlockId block);
  // Drops one reference; at zero the block goes to the back of the free queue.
  void release(BlockId block);
  // The block at the front of the free queue (next to be reused), or -1.
  BlockId peek_free() const { return head_; }

 private:
  void unlink(BlockId block);
  void push_back(BlockId block);

  std::vector<int32_t> ref_count_;
  // Doubly linked free queue through prev_/next_ (O(1) removal from the middle when a cached
  // free block is reused).
  std::vector<BlockId> prev_;
  std::vector<BlockId> next_;
  BlockId head_ = -1;
  BlockId tail_ = -1;
  int32_t num_free_ = 0;
};

}  // namespace kestrel
