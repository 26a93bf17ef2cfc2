// KVCacheManager: which blocks each request holds, plus automatic prefix caching on top of the
// BlockPool. Requests are known only by an id and their tokens here, so the scheduler and this
// class are tested without a model.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/prefix_cache.h"

namespace kestrel {

using RequestId = uint64_t;

// Full blocks of a request's prefix already in the cache, found by find_cached_prefix().
struct CachedPrefix {
  std::vector<BlockId> blocks;
  std::vector<uint64_t> hashes;
  int64_t num_tokens = 0;  // blocks.size() * block_size
};

class KVCacheManager {
 public:
  KVCacheManager(int32_t num_blocks, int block_size, bool enable_prefix_caching = false,
                 PrefixCache::HashFn hash = {});

  int block_size() const { return block_size_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  int32_t num_free_blocks() const { return pool_.num_free(); }
  int32_t num_used_blocks() const { return pool_.num_used(); }
  bool prefix_caching() const { return enable_prefix_caching_; }
  int64_t blocks_for_tokens(int64_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }

  // The longest run of cached full blocks at the start of `tokens` (no side effects). Callers
  // pass at most num_tokens - 1 tokens, so at least one token is always computed (it yields the
  // logits to sample from).
  CachedPrefix find_cached_prefix(std::span<const int32_t> tokens) const;

  // Makes sure `request` holds slots for its first `num_tokens` tokens. A request that holds no
  // blocks yet may start with `prefix` (shared, reference-counted). Returns false, and takes
  // nothing, if not enough blocks are free.
  bool allocate_slots(RequestId request, int64_t num_tokens, const CachedPrefix* prefix = nullptr);
  // Registers the request's full, computed blocks in the prefix cache.
  void cache_computed_blocks(RequestId request, std::span<const int32_t> tokens,
                             int64_t num_computed_tokens);
  // Gives back every block of the request (cached ones stay reusable until evicted).
  void free(RequestId request);
  const std::vector<BlockId>& block_table(RequestId request) const;

  const BlockPool& pool() const { return pool_; }
  int64_t num_cached_blocks() const { return int64_t(cache_.num_cached()); }
  // Prefix-cache statistics over all admissions: tokens looked up and tokens found.
  void record_prefix_query(int64_t query_tokens, int64_t hit_tokens) {
    prefix_query_tokens_ += query_tokens;
    prefix_hit_tokens_ += hit_tokens;
  }
  int64_t prefix_query_tokens() const { return prefix_query_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }

 private:
  struct Table {
    std::vector<BlockId> blocks;
    std::vector<uint64_t> hashes;  // chain hashes of the leading full blocks known so far
  };
  std::vector<BlockId> take_fresh_blocks(int32_t count);

  int block_size_;
  bool enable_prefix_caching_;
  BlockPool pool_;
  PrefixCache cache_;
  std::unordered_map<RequestId, Table> tables_;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace kestrel
