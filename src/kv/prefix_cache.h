// PrefixCache: which KV blocks hold which token prefixes, so a new request can reuse every full
// block of a prefix that was already computed (automatic prefix caching).
//
// A full block is found by hash(parent block's hash, this block's tokens) (xxhash64). A hash hit is
// only trusted after confirmation: the stored tokens must equal the request's tokens, and the
// stored parent must be the block the request matched one step earlier, still holding the content
// it had then (each block carries a generation number, bumped whenever the block is reused for
// other content). By induction a confirmed block holds exactly this prefix, so even a forced hash
// collision can never hand out wrong K/V.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace kestrel {

class PrefixCache {
 public:
  using HashFn = std::function<uint64_t(uint64_t parent_hash, std::span<const int32_t> tokens)>;
  static constexpr uint64_t kRootHash = 0x6b657374726c3031ULL;  // the parent hash of block 0

  // `hash` may be replaced in tests to force collisions.
  PrefixCache(int32_t num_blocks, HashFn hash = {});

  uint64_t chain_hash(uint64_t parent_hash, std::span<const int32_t> tokens) const {
    return hash_(parent_hash, tokens);
  }
  // The cached block for `hash` whose content is `tokens` after `parent` (-1 for the first block),
  // or -1.
  BlockId lookup(uint64_t hash, BlockId parent, std::span<const int32_t> tokens) const;
  // Records that `block` now holds `tokens` after `parent`. Returns false (and records nothing) if
  // another block already holds this hash: the duplicate simply stays private to its request.
  bool insert(BlockId block, uint64_t hash, BlockId parent, std::span<const int32_t> tokens);
  // The block is about to hold other content: drop it from the cache and invalidate its children.
  void forget(BlockId block);
  bool is_cached(BlockId block) const { return entries_[size_t(block)].cached; }
  size_t num_cached() const { return by_hash_.size(); }

 private:
  struct Entry {
    bool cached = false;
    uint64_t hash = 0;
    BlockId parent = -1;
    uint32_t parent_generation = 0;
    std::vector<int32_t> tokens;
  };
  uint32_t generation_of(BlockId block) const {
    return block < 0 ? 0 : generations_[size_t(block)];
  }

  HashFn hash_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> generations_;
  std::unordered_map<uint64_t, BlockId> by_hash_;
};

}  // namespace kestrel
