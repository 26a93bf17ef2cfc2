// KVCacheManager: which blocks each request holds. Requests are known only by an id and token
// counts here, so the scheduler can be tested without a model.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace kestrel {

using RequestId = uint64_t;

class KVCacheManager {
 public:
  KVCacheManager(int32_t num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  int32_t num_free_blocks() const { return pool_.num_free(); }
  int32_t num_used_blocks() const { return pool_.num_used(); }
  int64_t blocks_for_tokens(int64_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }

  // Makes sure `request` holds slots for its first `num_tokens` tokens, taking new blocks as
  // needed. Returns false, and takes nothing, if not enough blocks are free.
  bool allocate_slots(RequestId request, int64_t num_tokens);
  // Gives back every block of the request.
  void free(RequestId request);
  // The request's blocks in position order (empty if it holds none).
  const std::vector<BlockId>& block_table(RequestId request) const;

  const BlockPool& pool() const { return pool_; }

 private:
  int block_size_;
  BlockPool pool_;
  std::unordered_map<RequestId, std::vector<BlockId>> tables_;
};

}  // namespace kestrel
