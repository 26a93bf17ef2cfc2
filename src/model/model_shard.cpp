#include "model/model_shard.h"

#include <algorithm>

#include "core/error.h"

namespace kestrel {
namespace {

// [begin, end) of part `i` of `units` split into `parts` near-equal pieces.
int64_t part_begin(int64_t units, int parts, int i) { return units * i / parts; }

}  // namespace

ModelShard plan_model_shard(const ModelConfig& c, int tp, int tp_rank, int pp, int pp_rank, int64_t ff_align,
                            bool tp_deterministic) {
  if (tp < 1 || pp < 1 || tp_rank < 0 || tp_rank >= tp || pp_rank < 0 || pp_rank >= pp) {
    fail("internal: rank ({}, {}) outside tp {} x pp {}", tp_rank, pp_rank, tp, pp);
  }
  if (pp > c.n_layer) fail("--pp {} asks for more pipeline stages than the model's {} layers", pp, c.n_layer);
  ModelShard shard;
  shard.tp_size = tp;
  shard.tp_rank = tp_rank;
  shard.pp_size = pp;
  shard.pp_rank = pp_rank;
  shard.tp_deterministic = tp_deterministic;
  shard.layer_begin = part_begin(c.n_layer, pp, pp_rank);
  shard.layer_end = part_begin(c.n_layer, pp, pp_rank + 1);

  const int64_t group = c.n_head / c.n_head_kv;  // query heads per KV head
  if (tp > c.n_head_kv && (tp % c.n_head_kv != 0 || tp / c.n_head_kv > group)) {
    fail("--tp {} cannot split {} query heads sharing {} KV heads: with more ranks than KV heads, the ranks must "
         "divide evenly among the KV heads and each KV head needs a query head per rank (try --tp {})",
         tp, c.n_head, c.n_head_kv, c.n_head_kv);
  }
  // Splits fall on whole blocks of the FFN-down format (ff_align) and whole row tiles of the
  // kernels, so every shard is whole blocks and tiles.
  if (ff_align < 1 || c.n_ff % ff_align != 0) fail("internal: FFN alignment {} for {} channels", ff_align, c.n_ff);
  const int64_t ff_units = c.n_ff / ff_align;
  if (ff_units < tp) fail("--tp {} is more than the {} FFN blocks of {} channels", tp, ff_units, ff_align);
  // The largest row tile that still gives every rank some rows.
  auto row_unit = [&](int64_t rows) {
    for (int64_t unit : {64, 32, 16, 8, 4}) {
      if ((rows + unit - 1) / unit >= tp) return unit;
    }
    return int64_t(1);
  };
  const int64_t vocab_unit = row_unit(c.n_vocab), embd_unit = row_unit(c.n_embd);
  const int64_t vocab_units = (c.n_vocab + vocab_unit - 1) / vocab_unit;
  const int64_t embd_units = (c.n_embd + embd_unit - 1) / embd_unit;
  if (embd_units < tp && tp_deterministic) fail("--tp {} is more than the hidden size's {} rows", tp, c.n_embd);

  for (int r = 0; r < tp; ++r) {
    RankSlice s;
    if (tp <= c.n_head_kv) {
      s.kv_head_begin = part_begin(c.n_head_kv, tp, r);
      s.kv_head_end = part_begin(c.n_head_kv, tp, r + 1);
      s.q_head_begin = s.kv_head_begin * group;
      s.q_head_end = s.kv_head_end * group;
    } else {
      // Several ranks share each KV head (each computes it); its query heads are split among them.
      const int per_kv = tp / int(c.n_head_kv);
      const int64_t kv = r / per_kv;
      const int j = r % per_kv;
      s.kv_head_begin = kv;
      s.kv_head_end = kv + 1;
      s.q_head_begin = kv * group + part_begin(group, per_kv, j);
      s.q_head_end = kv * group + part_begin(group, per_kv, j + 1);
    }
    s.ff_begin = part_begin(ff_units, tp, r) * ff_align;
    s.ff_end = part_begin(ff_units, tp, r + 1) * ff_align;
    s.vocab_begin = std::min(c.n_vocab, part_begin(vocab_units, tp, r) * vocab_unit);
    s.vocab_end = std::min(c.n_vocab, part_begin(vocab_units, tp, r + 1) * vocab_unit);
    s.embd_begin = std::min(c.n_embd, part_begin(embd_units, tp, r) * embd_unit);
    s.embd_end = std::min(c.n_embd, part_begin(embd_units, tp, r + 1) * embd_unit);
    shard.slices.push_back(s);
  }
  return shard;
}

}  // namespace kestrel
