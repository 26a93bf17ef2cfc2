// The one message from the runner to a model's forward pass: a flattened batch of tokens from many
// sequences, where each sequence's K/V live in blocks of a shared paged cache.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/kv_spec.h"
#include "model/mla_attention.h"
#include "model/moe_ffn.h"

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
  // An output head over part of the vocabulary to use instead of the model's (a draft model's
  // most frequent tokens, spec/draft_head.h): [head->rows][n_embd], logits then
  // [logits rows][head->rows]. Null: the model's own head, logits [logits rows][n_vocab]. Not
  // owned; one process only (never sent to other ranks).
  const WeightView* head = nullptr;

  int64_t num_tokens() const { return int64_t(token_ids.size()); }
};

// Which KV-cache group each layer belongs to, and what each group's layers see: a window (0 =
// full attention) and, for rolling windows, the attention sinks kept at the start. Full-attention
// layers form group 0 when there are any; sliding-window layers the next group.
struct KvLayout {
  std::vector<int> group_windows;
  std::vector<int> group_sinks;
  std::vector<int> layer_group;
};

// The paged K/V storage of every layer: layer l lives in group layout.layer_group[l], whose
// blocks are laid out as spec describes (core/kv_spec.h).
struct KvCacheView {
  std::vector<KvLayerView> layers;
  KvLayout layout;
  std::vector<int64_t> num_blocks;  // per group
  KvCacheSpec spec;
};

// Activation buffers reused across forward calls (grown as needed, never shrunk).
struct ForwardScratch {
  std::vector<float> hidden, normed, q, k, v, attn, proj, gate, up, logits_in;
  std::vector<float> gathered, gathered_rows, own_rows, logits_local;  // tensor-parallel gathers
  std::vector<float> qk_whole;  // [T][q or kv width]: q or k of every head, for a norm over all heads under --tp
  MoeScratch moe;                                                      // Mixture-of-Experts layers
  MlaScratch mla;                                                      // latent attention
  std::vector<float> values;                                           // [T][attn_out_width] (MLA)
};

}  // namespace kestrel
