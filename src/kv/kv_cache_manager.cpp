#include "kv/kv_cache_manager.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {

KVCacheManager::KVCacheManager(int32_t num_blocks, int block_size, bool enable_prefix_caching,
                               PrefixCache::HashFn hash)
    : KVCacheManager(std::vector<KVCacheGroupSpec>{{num_blocks, 0}}, block_size, enable_prefix_caching,
                     std::move(hash)) {}

KVCacheManager::KVCacheManager(std::vector<KVCacheGroupSpec> groups, int block_size,
                               bool enable_prefix_caching, PrefixCache::HashFn hash)
    : block_size_(block_size), enable_prefix_caching_(enable_prefix_caching) {
  if (block_size <= 0) fail("KV block size must be positive, got {}", block_size);
  if (groups.empty()) fail("internal: a KV cache needs at least one group");
  groups_.reserve(groups.size());
  for (const KVCacheGroupSpec& spec : groups) {
    if (spec.window < 0) fail("internal: negative sliding window");
    if (spec.sinks < 0 || (spec.sinks > 0 && spec.sinks >= spec.window)) {
      fail("internal: {} attention sinks for a window of {}", spec.sinks, spec.window);
    }
    if (spec.window > 0) enable_prefix_caching_ = false;  // see the header
    groups_.emplace_back(spec, hash);
  }
}

int32_t KVCacheManager::num_blocks() const {
  int32_t n = 0;
  for (const Group& g : groups_) n += g.pool.num_blocks();
  return n;
}

int32_t KVCacheManager::num_free_blocks() const {
  int32_t n = 0;
  for (const Group& g : groups_) n += g.pool.num_free();
  return n;
}

int64_t KVCacheManager::max_blocks_held(int group, int64_t num_tokens, int64_t max_chunk_tokens) const {
  const Group& g = groups_[size_t(group)];
  const int64_t all = blocks_for_tokens(num_tokens);
  if (g.window == 0) return all;
  // While a chunk [c, c + n) is computed the group holds its sink blocks and the blocks from the
  // one holding the window's first recent position to the one holding c + n - 1: at most
  // ceil((window - sinks - 1) / bs) + 1 for the window and ceil(n / bs) + 1 for the chunk.
  const int recent = g.window - g.sinks;
  return std::min(all, sink_blocks(g) + (recent - 1 + block_size_ - 1) / block_size_ + 1 +
                           (max_chunk_tokens + block_size_ - 1) / block_size_ + 1);
}

int64_t KVCacheManager::first_kept_block(const Group& g, int64_t num_computed_tokens) const {
  if (g.window == 0) return 0;
  // The next token computed (position num_computed_tokens) sees back to position
  // num_computed_tokens - (window - sinks) + 1 (and its sinks); blocks entirely before that are
  // never read again, but for the sinks'.
  const int64_t first_visible = num_computed_tokens - (g.window - g.sinks) + 1;
  return first_visible <= 0 ? 0 : first_visible / block_size_;
}

std::string KVCacheManager::check_fits(int64_t num_tokens, int64_t max_chunk_tokens) const {
  for (size_t i = 0; i < groups_.size(); ++i) {
    const int64_t need = max_blocks_held(int(i), num_tokens, max_chunk_tokens);
    if (need > groups_[i].pool.num_blocks()) {
      return fmt::format("the request needs {} KV blocks but the whole cache has {}", need,
                         groups_[i].pool.num_blocks());
    }
  }
  return "";
}

CachedPrefix KVCacheManager::find_cached_prefix(std::span<const int32_t> tokens) const {
  CachedPrefix prefix;
  if (!enable_prefix_caching_) return prefix;
  const size_t full_blocks = tokens.size() / size_t(block_size_);
  prefix.blocks.resize(groups_.size());
  uint64_t parent_hash = PrefixCache::kRootHash;
  for (size_t i = 0; i < full_blocks; ++i) {
    const auto block_tokens = tokens.subspan(i * size_t(block_size_), size_t(block_size_));
    const uint64_t hash = groups_[0].cache.chain_hash(parent_hash, block_tokens);
    // Groups are allocated and computed in lockstep, so they normally hit alike; a block evicted
    // from one group ends the reusable prefix for all.
    std::vector<BlockId> found(groups_.size(), -1);
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      const BlockId parent = i == 0 ? -1 : prefix.blocks[gi].back();
      found[gi] = groups_[gi].cache.lookup(hash, parent, block_tokens);
      if (found[gi] < 0) break;
    }
    if (std::find(found.begin(), found.end(), -1) != found.end()) break;
    for (size_t gi = 0; gi < groups_.size(); ++gi) prefix.blocks[gi].push_back(found[gi]);
    prefix.hashes.push_back(hash);
    parent_hash = hash;
  }
  prefix.num_tokens = int64_t(prefix.hashes.size()) * block_size_;
  return prefix;
}

std::vector<BlockId> KVCacheManager::take_fresh_blocks(Group& g, int32_t count) {
  std::vector<BlockId> blocks = g.pool.allocate(count);
  // A reused block loses whatever cached content it had.
  for (BlockId b : blocks) g.cache.forget(b);
  return blocks;
}

bool KVCacheManager::allocate_slots(RequestId request, int64_t num_tokens, const CachedPrefix* prefix,
                                    int64_t num_computed_tokens) {
  const int64_t wanted_blocks = blocks_for_tokens(num_tokens);
  // Blocks in [gap_begin, gap_end) are out of a sliding group's sight: freed, or never taken.
  auto gap = [&](const Group& g) {
    const int64_t begin = sink_blocks(g);
    return std::pair{begin, std::max(begin, first_kept_block(g, num_computed_tokens))};
  };
  // First check every group, so that a failure takes nothing anywhere.
  std::vector<int64_t> needed(groups_.size());
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    const auto it = g.tables.find(request);
    const int64_t held = it == g.tables.end() ? 0 : int64_t(it->second.blocks.size());
    const bool with_prefix = prefix != nullptr && held == 0 && !prefix->hashes.empty();
    const int64_t start = with_prefix ? int64_t(prefix->hashes.size()) : held;
    const auto [gap_begin, gap_end] = gap(g);
    // New blocks in [start, wanted), but for those a sliding group would only free at once.
    const int64_t skipped = std::max<int64_t>(0, std::min(wanted_blocks, gap_end) - std::max(start, gap_begin));
    needed[gi] = std::max<int64_t>(0, wanted_blocks - start - skipped);
    int64_t available = g.pool.num_free();
    if (with_prefix) {
      for (BlockId b : prefix->blocks[gi]) available -= g.pool.is_free(b) ? 1 : 0;
    }
    // Blocks this call frees (out of the window) count as available.
    if (it != g.tables.end()) {
      for (int64_t b = gap_begin; b < std::min(gap_end, held); ++b) {
        const BlockId id = it->second.blocks[size_t(b)];
        if (id >= 0 && g.pool.ref_count(id) == 1) ++available;
      }
    }
    if (needed[gi] > available) return false;
  }
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    Table& table = g.tables[request];
    if (prefix != nullptr && table.blocks.empty() && !prefix->hashes.empty()) {
      for (BlockId b : prefix->blocks[gi]) g.pool.add_ref(b);
      table.blocks = prefix->blocks[gi];
      table.hashes = prefix->hashes;
    }
    // Free what no coming token can see (sliding groups only).
    const auto [gap_begin, gap_end] = gap(g);
    for (int64_t b = gap_begin; b < std::min<int64_t>(gap_end, int64_t(table.blocks.size())); ++b) {
      if (table.blocks[size_t(b)] >= 0) {
        g.pool.release(table.blocks[size_t(b)]);
        table.blocks[size_t(b)] = -1;
      }
    }
    const std::vector<BlockId> fresh = take_fresh_blocks(g, int32_t(needed[gi]));
    size_t next = 0;
    while (int64_t(table.blocks.size()) < wanted_blocks) {
      const int64_t b = int64_t(table.blocks.size());
      table.blocks.push_back(b >= gap_begin && b < gap_end ? -1 : fresh[next++]);
    }
  }
  return true;
}

void KVCacheManager::cache_computed_blocks(RequestId request, std::span<const int32_t> tokens,
                                           int64_t num_computed_tokens) {
  if (!enable_prefix_caching_) return;
  for (Group& g : groups_) {
    const auto it = g.tables.find(request);
    if (it == g.tables.end()) continue;
    Table& table = it->second;
    const size_t full_blocks =
        std::min(size_t(num_computed_tokens / block_size_), table.blocks.size());
    while (table.hashes.size() < full_blocks) {
      const size_t i = table.hashes.size();
      const auto block_tokens = tokens.subspan(i * size_t(block_size_), size_t(block_size_));
      const uint64_t parent_hash = i == 0 ? PrefixCache::kRootHash : table.hashes[i - 1];
      const BlockId parent = i == 0 ? -1 : table.blocks[i - 1];
      const uint64_t hash = g.cache.chain_hash(parent_hash, block_tokens);
      g.cache.insert(table.blocks[i], hash, parent, block_tokens);
      table.hashes.push_back(hash);
    }
  }
}

void KVCacheManager::trim(RequestId request, int64_t num_tokens) {
  const size_t keep = size_t(blocks_for_tokens(num_tokens));
  for (Group& g : groups_) {
    const auto it = g.tables.find(request);
    if (it == g.tables.end()) continue;
    Table& table = it->second;
    // A hashed block stays in the prefix cache (its K/V are those of its tokens) when released.
    if (table.hashes.size() > keep) table.hashes.resize(keep);
    while (table.blocks.size() > keep) {
      if (table.blocks.back() >= 0) g.pool.release(table.blocks.back());
      table.blocks.pop_back();
    }
  }
}

void KVCacheManager::free(RequestId request) {
  for (Group& g : groups_) {
    const auto it = g.tables.find(request);
    if (it == g.tables.end()) continue;
    // Release the tail first so that, in the free queue, a request's later blocks are evicted
    // before its earlier ones (earlier blocks are the likelier shared prefix).
    for (auto block = it->second.blocks.rbegin(); block != it->second.blocks.rend(); ++block) {
      if (*block >= 0) g.pool.release(*block);
    }
    g.tables.erase(it);
  }
}

const std::vector<BlockId>& KVCacheManager::block_table(RequestId request, int group) const {
  static const std::vector<BlockId> kEmpty;
  const Group& g = groups_[size_t(group)];
  const auto it = g.tables.find(request);
  return it == g.tables.end() ? kEmpty : it->second.blocks;
}

}  // namespace kestrel
