// The one message from the runner to a model's forward pass: a flattened batch of tokens from many
// sequences, where each sequence's K/V live in blocks of a shared paged cache.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace kestrel {

struct ForwardBatch {
  std::vector<int32_t> token_ids;       // [num_tokens]
  std::vector<int32_t> positions;       // [num_tokens] position of each token in its sequence
  std::vector<int32_t> token_seq;       // [num_tokens] row of block_tables for each token
  std::vector<int64_t> slot_mapping;    // [num_tokens] cache slot where each token's K/V go
  std::vector<int32_t> block_tables;    // [num_seqs][max_blocks_per_seq], unused entries -1
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> logits_indices;  // tokens whose logits are wanted; output row order

  int64_t num_tokens() const { return int64_t(token_ids.size()); }
  int64_t num_seqs() const {
    return max_blocks_per_seq == 0 ? 0 : int64_t(block_tables.size()) / max_blocks_per_seq;
  }
};

// The paged K/V storage of every layer.
struct KvCacheView {
  std::vector<KvLayerView> layers;
  int block_size = 16;
  int64_t num_blocks = 0;
};

// Activation buffers reused across forward calls (grown as needed, never shrunk).
struct ForwardScratch {
  std::vector<float> hidden, normed, q, k, v, attn, proj, gate, up, logits_in;
};

}  // namespace kestrel
