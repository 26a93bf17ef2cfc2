// KVCacheManager: which blocks each request holds, with automatic prefix caching, for one or more
// KV-cache groups. Requests are known only by an id and their tokens here, so the scheduler and
// this class are tested without a model.
//
// A group is a set of layers that share block tables: full-attention layers keep every position;
// sliding-window layers (Mistral, Gemma 3's local layers) need only the last `window` positions,
// so their blocks that fall entirely out of the window are freed as the request advances — a
// sliding group holds about window / block_size + 1 blocks per request however long it runs.
// A rolling window with attention sinks (StreamingLLM) is a sliding group that also keeps the
// blocks of its first `sinks` positions. Each group has its own pool (its blocks hold a different
// set of layers).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/prefix_cache.h"

namespace kestrel {

using RequestId = uint64_t;

struct KVCacheGroupSpec {
  int32_t num_blocks = 0;
  int window = 0;  // 0: full attention; else the tokens a position sees (sinks included)
  int sinks = 0;   // positions [0, sinks) stay visible (with window > 0)
};

// Full blocks of a request's prefix already in the cache, found by find_cached_prefix().
struct CachedPrefix {
  // Per group, the cached blocks in position order: every group holds its own layers' K/V for
  // the same positions, so a prefix is reusable only as far as every group still has it.
  std::vector<std::vector<BlockId>> blocks;
  std::vector<uint64_t> hashes;  // chain hashes of those blocks (the same in every group)
  int64_t num_tokens = 0;        // hashes.size() * block_size
};

class KVCacheManager {
 public:
  // One full-attention group.
  KVCacheManager(int32_t num_blocks, int block_size, bool enable_prefix_caching = false,
                 PrefixCache::HashFn hash = {});
  // Several groups. Prefix caching applies only when every group is full attention (a sliding
  // group would need the window's blocks before the hit too; not implemented). Several
  // full-attention groups (sliding layers whose blocks are kept) each cache their own blocks.
  KVCacheManager(std::vector<KVCacheGroupSpec> groups, int block_size, bool enable_prefix_caching,
                 PrefixCache::HashFn hash = {});

  int block_size() const { return block_size_; }
  int num_groups() const { return int(groups_.size()); }
  int group_window(int group) const { return groups_[size_t(group)].window; }
  int group_sinks(int group) const { return groups_[size_t(group)].sinks; }
  // Totals over all groups (for metrics); per group with the `group` argument.
  int32_t num_blocks() const;
  int32_t num_free_blocks() const;
  int32_t num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  int32_t num_blocks(int group) const { return groups_[size_t(group)].pool.num_blocks(); }
  int32_t num_free_blocks(int group) const { return groups_[size_t(group)].pool.num_free(); }
  bool prefix_caching() const { return enable_prefix_caching_; }
  int64_t blocks_for_tokens(int64_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }
  // Why a sequence of `num_tokens` computed in chunks of at most `max_chunk_tokens` can never be
  // held, or "" if it can: the most blocks it ever needs at once in some group exceeds that
  // group's pool.
  std::string check_fits(int64_t num_tokens, int64_t max_chunk_tokens) const;
  // Blocks a sequence of num_tokens holds at most at once in `group` (chunks as above).
  int64_t max_blocks_held(int group, int64_t num_tokens, int64_t max_chunk_tokens) const;

  // The longest run of cached full blocks at the start of `tokens` (no side effects). Callers
  // pass at most num_tokens - 1 tokens, so at least one token is always computed (it yields the
  // logits to sample from).
  CachedPrefix find_cached_prefix(std::span<const int32_t> tokens) const;

  // Makes sure `request` holds slots for tokens up to `num_tokens`, taking new blocks as needed;
  // `num_computed_tokens` (the first position computed next) lets sliding groups free blocks that
  // no coming token can see. A request that holds no blocks yet may start with `prefix` (shared,
  // reference-counted). Returns false, and takes nothing, if some group lacks free blocks.
  bool allocate_slots(RequestId request, int64_t num_tokens, const CachedPrefix* prefix = nullptr,
                      int64_t num_computed_tokens = 0);
  // Registers the request's full, computed blocks in the prefix cache.
  void cache_computed_blocks(RequestId request, std::span<const int32_t> tokens,
                             int64_t num_computed_tokens);
  // Gives back the request's blocks past the first `num_tokens` slots (speculative lookahead that
  // was rejected), last first. A released block that was hashed stays findable in the prefix
  // cache until evicted (its K/V are those of its tokens).
  void trim(RequestId request, int64_t num_tokens);
  // Gives back every block of the request (cached ones stay reusable until evicted).
  void free(RequestId request);
  // The request's blocks in position order; a sliding group's freed entries are -1.
  const std::vector<BlockId>& block_table(RequestId request, int group = 0) const;

  const BlockPool& pool(int group = 0) const { return groups_[size_t(group)].pool; }
  int64_t num_cached_blocks() const { return int64_t(groups_[0].cache.num_cached()); }
  // Prefix-cache statistics over all admissions: tokens looked up and tokens found.
  void record_prefix_query(int64_t query_tokens, int64_t hit_tokens) {
    prefix_query_tokens_ += query_tokens;
    prefix_hit_tokens_ += hit_tokens;
  }
  int64_t prefix_query_tokens() const { return prefix_query_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }

 private:
  struct Table {
    std::vector<BlockId> blocks;   // -1 where a sliding group already freed the block
    std::vector<uint64_t> hashes;  // chain hashes of the leading full blocks known so far
  };
  struct Group {
    int window;
    int sinks;
    BlockPool pool;
    PrefixCache cache;
    std::unordered_map<RequestId, Table> tables;
    Group(const KVCacheGroupSpec& spec, PrefixCache::HashFn hash)
        : window(spec.window), sinks(spec.sinks), pool(spec.num_blocks), cache(spec.num_blocks, std::move(hash)) {}
  };
  // Blocks [sink_blocks(g), first_kept_block(g, n)) of a request are never read again once
  // position n is the first to be computed: the gap between a sliding group's sinks (none
  // without) and its window.
  int64_t first_kept_block(const Group& g, int64_t num_computed_tokens) const;
  int64_t sink_blocks(const Group& g) const { return blocks_for_tokens(g.sinks); }
  std::vector<BlockId> take_fresh_blocks(Group& g, int32_t count);

  int block_size_;
  bool enable_prefix_caching_;
  std::vector<Group> groups_;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace kestrel
