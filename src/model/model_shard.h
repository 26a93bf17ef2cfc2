// Which part of a model one rank holds when the model is split over processes (dist/parallel.h):
// the pipeline stage's contiguous layers, and within them the tensor-parallel rank's Megatron
// slice - whole query heads with the key/value heads they read (replicated when ranks outnumber
// KV heads), whole FFN channels (cut at the FFN-down format's block boundaries, so row-parallel
// shards never cut a quant block), and whole rows of the embedding and output head. A pure
// function of the config: every rank computes every rank's slice, as gathers need the sizes.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace kestrel {

struct RankSlice {
  int64_t q_head_begin = 0, q_head_end = 0;    // query heads
  int64_t kv_head_begin = 0, kv_head_end = 0;  // key/value heads
  int64_t ff_begin = 0, ff_end = 0;            // FFN channels (rows of gate/up, columns of down)
  int64_t vocab_begin = 0, vocab_end = 0;      // rows of token_embd and the output head
  int64_t embd_begin = 0, embd_end = 0;        // hidden channels (--tp-deterministic: output rows of
                                               // attn_output and ffn_down)
  int64_t n_head() const { return q_head_end - q_head_begin; }
  int64_t n_head_kv() const { return kv_head_end - kv_head_begin; }
  int64_t n_ff() const { return ff_end - ff_begin; }
  int64_t n_vocab() const { return vocab_end - vocab_begin; }
  int64_t n_embd() const { return embd_end - embd_begin; }
};

// What a rank asks Model::load for (dist/parallel.h's sizes and this rank's place).
struct ShardRequest {
  int tp_size = 1, tp_rank = 0;
  int pp_size = 1, pp_rank = 0;
  bool tp_deterministic = false;
};

struct ModelShard {
  int tp_size = 1, tp_rank = 0;
  int pp_size = 1, pp_rank = 0;
  bool tp_deterministic = false;
  int64_t layer_begin = 0, layer_end = 0;  // this stage's layers
  std::vector<RankSlice> slices;           // [tp_size] every tensor-parallel rank's slice

  const RankSlice& mine() const { return slices[size_t(tp_rank)]; }
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp_size - 1; }
  bool holds_layer(int64_t layer) const { return layer >= layer_begin && layer < layer_end; }
};

// The split of `config` over tp x pp ranks for the rank (tp_rank, pp_rank). `ff_align`: columns of
// the FFN-down format's block (the FFN split's unit). A model that cannot be split so (more ranks
// than heads in a KV group, KV heads not divisible among ranks, fewer layers than stages) is an
// error saying why.
ModelShard plan_model_shard(const ModelConfig& config, int tp_size, int tp_rank, int pp_size, int pp_rank,
                            int64_t ff_align, bool tp_deterministic);

}  // namespace kestrel
