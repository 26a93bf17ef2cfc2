#include "kv/kv_cache_manager.h"

#include "core/error.h"

namespace kestrel {

KVCacheManager::KVCacheManager(int32_t num_blocks, int block_size, bool enable_prefix_caching,
                               PrefixCache::HashFn hash)
    : block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching),
      pool_(num_blocks),
      cache_(num_blocks, std::move(hash)) {
  if (block_size <= 0) fail("KV block size must be positive, got {}", block_size);
}

CachedPrefix KVCacheManager::find_cached_prefix(std::span<const int32_t> tokens) const {
  CachedPrefix prefix;
  if (!enable_prefix_caching_) return prefix;
  const size_t full_blocks = tokens.size() / size_t(block_size_);
  uint64_t parent_hash = PrefixCache::kRootHash;
  BlockId parent = -1;
  for (size_t i = 0; i < full_blocks; ++i) {
    const auto block_tokens = tokens.subspan(i * size_t(block_size_), size_t(block_size_));
    const uint64_t hash = cache_.chain_hash(parent_hash, block_tokens);
    const BlockId block = cache_.lookup(hash, parent, block_tokens);
    if (block < 0) break;
    prefix.blocks.push_back(block);
    prefix.hashes.push_back(hash);
    parent_hash = hash;
    parent = block;
  }
  prefix.num_tokens = int64_t(prefix.blocks.size()) * block_size_;
  return prefix;
}

std::vector<BlockId> KVCacheManager::take_fresh_blocks(int32_t count) {
  std::vector<BlockId> blocks = pool_.allocate(count);
  // A reused block loses whatever cached content it had.
  for (BlockId b : blocks) cache_.forget(b);
  return blocks;
}

bool KVCacheManager::allocate_slots(RequestId request, int64_t num_tokens, const CachedPrefix* prefix) {
  auto [it, inserted] = tables_.try_emplace(request);
  Table& table = it->second;
  const bool with_prefix = prefix != nullptr && table.blocks.empty() && !prefix->blocks.empty();
  const int64_t held = with_prefix ? int64_t(prefix->blocks.size()) : int64_t(table.blocks.size());
  const int64_t needed = std::max<int64_t>(0, blocks_for_tokens(num_tokens) - held);
  // Cached blocks that sit in the free queue stop being free once this request takes them.
  int64_t available = pool_.num_free();
  if (with_prefix) {
    for (BlockId b : prefix->blocks) available -= pool_.is_free(b) ? 1 : 0;
  }
  if (needed > available) {
    if (table.blocks.empty()) tables_.erase(it);
    return false;
  }
  if (with_prefix) {
    for (BlockId b : prefix->blocks) pool_.add_ref(b);
    table.blocks = prefix->blocks;
    table.hashes = prefix->hashes;
  }
  const std::vector<BlockId> fresh = take_fresh_blocks(int32_t(needed));
  table.blocks.insert(table.blocks.end(), fresh.begin(), fresh.end());
  return true;
}

void KVCacheManager::cache_computed_blocks(RequestId request, std::span<const int32_t> tokens,
                                           int64_t num_computed_tokens) {
  if (!enable_prefix_caching_) return;
  const auto it = tables_.find(request);
  if (it == tables_.end()) return;
  Table& table = it->second;
  const size_t full_blocks =
      std::min(size_t(num_computed_tokens / block_size_), table.blocks.size());
  while (table.hashes.size() < full_blocks) {
    const size_t i = table.hashes.size();
    const auto block_tokens = tokens.subspan(i * size_t(block_size_), size_t(block_size_));
    const uint64_t parent_hash = i == 0 ? PrefixCache::kRootHash : table.hashes[i - 1];
    const BlockId parent = i == 0 ? -1 : table.blocks[i - 1];
    const uint64_t hash = cache_.chain_hash(parent_hash, block_tokens);
    cache_.insert(table.blocks[i], hash, parent, block_tokens);
    table.hashes.push_back(hash);
  }
}

void KVCacheManager::free(RequestId request) {
  const auto it = tables_.find(request);
  if (it == tables_.end()) return;
  // Release the tail first so that, in the free queue, a request's later blocks are evicted before
  // its earlier ones (earlier blocks are the likelier shared prefix).
  for (auto block = it->second.blocks.rbegin(); block != it->second.blocks.rend(); ++block) {
    pool_.release(*block);
  }
  tables_.erase(it);
}

const std::vector<BlockId>& KVCacheManager::block_table(RequestId request) const {
  static const std::vector<BlockId> kEmpty;
  const auto it = tables_.find(request);
  return it == tables_.end() ? kEmpty : it->second.blocks;
}

}  // namespace kestrel
