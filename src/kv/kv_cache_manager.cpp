#include "kv/kv_cache_manager.h"

#include "core/error.h"

namespace kestrel {

KVCacheManager::KVCacheManager(int32_t num_blocks, int block_size)
    : block_size_(block_size), pool_(num_blocks) {
  if (block_size <= 0) fail("KV block size must be positive, got {}", block_size);
}

bool KVCacheManager::allocate_slots(RequestId request, int64_t num_tokens) {
  std::vector<BlockId>& table = tables_[request];
  const int64_t needed = blocks_for_tokens(num_tokens) - int64_t(table.size());
  if (needed <= 0) return true;
  if (needed > pool_.num_free()) {
    if (table.empty()) tables_.erase(request);
    return false;
  }
  const std::vector<BlockId> fresh = pool_.allocate(int32_t(needed));
  table.insert(table.end(), fresh.begin(), fresh.end());
  return true;
}

void KVCacheManager::free(RequestId request) {
  const auto it = tables_.find(request);
  if (it == tables_.end()) return;
  // Release the tail first so that, in the free queue, a request's later blocks are reused before
  // its earlier ones (earlier blocks are the likelier shared prefix).
  for (auto block = it->second.rbegin(); block != it->second.rend(); ++block) pool_.release(*block);
  tables_.erase(it);
}

const std::vector<BlockId>& KVCacheManager::block_table(RequestId request) const {
  static const std::vector<BlockId> kEmpty;
  const auto it = tables_.find(request);
  return it == tables_.end() ? kEmpty : it->second;
}

}  // namespace kestrel
