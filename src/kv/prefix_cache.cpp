#include "kv/prefix_cache.h"

#include <algorithm>

#include <xxhash.h>

namespace kestrel {
namespace {

uint64_t xxhash_chain(uint64_t parent_hash, std::span<const int32_t> tokens) {
  return XXH64(tokens.data(), tokens.size_bytes(), parent_hash);
}

}  // namespace

PrefixCache::PrefixCache(int32_t num_blocks, HashFn hash)
    : hash_(hash ? std::move(hash) : HashFn(xxhash_chain)),
      entries_(size_t(num_blocks)),
      generations_(size_t(num_blocks), 0) {}

BlockId PrefixCache::lookup(uint64_t hash, BlockId parent, std::span<const int32_t> tokens) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const Entry& e = entries_[size_t(it->second)];
  if (e.parent != parent || e.parent_generation != generation_of(parent)) return -1;
  if (!std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end())) return -1;
  return it->second;
}

bool PrefixCache::insert(BlockId block, uint64_t hash, BlockId parent, std::span<const int32_t> tokens) {
  Entry& e = entries_[size_t(block)];
  if (e.cached || by_hash_.count(hash) != 0) return false;
  e.cached = true;
  e.hash = hash;
  e.parent = parent;
  e.parent_generation = generation_of(parent);
  e.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, block);
  return true;
}

void PrefixCache::forget(BlockId block) {
  Entry& e = entries_[size_t(block)];
  ++generations_[size_t(block)];
  if (!e.cached) return;
  by_hash_.erase(e.hash);
  e.cached = false;
  e.tokens.clear();
}

}  // namespace kestrel
