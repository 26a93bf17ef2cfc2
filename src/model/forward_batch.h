// The one message from the runner to a model's forward pass: a flattened batch of tokens from many
// sequences, where each sequence's K/V live in blocks of a shared paged cache.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace kestrel {

// Where a batch's K/V go and come from in one KV-cache group (a set of layers sharing block
// tables: full-attention layers, or sliding-window layers whose old blocks are freed).
struct KvGroupBatch {
  std::vector<int64_t> slot_mapping;   // [num_tokens] cache slot where each token's K/V go
  std::vector<int32_t> block_tables;   // [num_seqs][max_blocks_per_seq], unused/freed entries -1
  int32_t max_blocks_per_seq = 0;
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;       // [num_tokens]
  std::vector<int32_t> positions;       // [num_tokens] position of each token in its sequence
  std::vector<int32_t> token_seq;       // [num_tokens] row of the block tables for each token
  std::vector<KvGroupBatch> kv_groups;  // one per KV-cache group
  std::vector<int32_t> logits_indices;  // tokens whose logits are wanted; output row order

  int64_t num_tokens() const { return int64_t(token_ids.size()); }
};

// The paged K/V storage of every layer: layer l lives in group layer_group[l], whose blocks are
// [num_blocks[group]][block_size][n_kv_head][head_dim].
struct KvCacheView {
  std::vector<KvLayerView> layers;
  std::vector<int> layer_group;
  std::vector<int64_t> num_blocks;  // per group
  int block_size = 16;
};

// Which KV-cache group each layer belongs to, and each group's window (0 = full attention).
// Full-attention layers form group 0 when there are any; sliding-window layers the next group.
struct KvLayout {
  std::vector<int> group_windows;
  std::vector<int> layer_group;
};

// Activation buffers reused across forward calls (grown as needed, never shrunk).
struct ForwardScratch {
  std::vector<float> hidden, normed, q, k, v, attn, proj, gate, logits_in;
};

}  // namespace kestrel
