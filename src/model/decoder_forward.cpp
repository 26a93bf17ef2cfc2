// The decoder forward pass shared by every architecture, over a flattened batch (all sequences'
// tokens in one [T, width] activation matrix). Per layer:
//   h = Norm(x); q, k, v = h W (+ b) (latent attention: mla_attention.h); [q/k norm]; [RoPE];
//   [Hadamard rotation of q, k]; write K/V
//   to the paged cache in its types; paged attention (windowed on sliding layers, rolling window
//   with sinks when streaming, [soft-capped scores]); o = attn W_o (+ b); [Norm(o)]; [o *= r]; x += o
//   h = Norm(x) (or, parallel block, the attention's h); m = W_down (act(h W_gate) * h W_up)
//   (+ b) or W_down act(h W_up), or the MoE block (moe_ffn.h); [Norm(m)]; [m *= r]; x += m
// then the final norm and the output head (scaled, soft-capped) only for the rows that need
// logits. Norm is RMSNorm or LayerNorm; bracketed steps, biases and the activation follow the
// config's feature flags (model_config.h): architectures differ in configuration, never in a copy
// of this code.
//
// Split over ranks (model_shard.h) the same code runs on each rank's slice: q/k/v and gate/up on
// its heads and channels, attn_output and ffn_down as partial sums all-reduced over the tensor-
// parallel group (or, --tp-deterministic, on gathered inputs for its output rows, then gathered),
// the embedding and output head on its vocabulary rows. A pipeline stage runs its layers only;
// the runner moves the hidden state between stages.
#include <algorithm>
#include <numeric>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "core/error.h"
#include "model/model.h"

namespace kestrel {
namespace {

// Rank-major gathered blocks [rank][T][width_r] -> rows [T][sum width_r].
void interleave_rows(const float* gathered, int64_t T, std::span<const int64_t> widths, float* out) {
  int64_t total = 0;
  for (int64_t w : widths) total += w;
  const float* block = gathered;
  int64_t column = 0;
  for (int64_t w : widths) {
    for (int64_t t = 0; t < T; ++t) std::copy_n(block + t * w, w, out + t * total + column);
    block += T * w;
    column += w;
  }
}

// Every rank's [T][width_r] part gathered into full rows [T][sum width_r] on every rank.
void gather_rows(Communicator& tp, const float* mine, int64_t T, std::span<const int64_t> widths,
                 ForwardScratch& s, float* out) {
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int64_t w : widths) {
    counts.push_back(T * w);
    total += T * w;
  }
  s.gathered.resize(size_t(total));
  const int64_t my_count = counts[size_t(tp.rank())];
  tp.all_gather(std::span<const float>(mine, size_t(my_count)), s.gathered, counts);
  interleave_rows(s.gathered.data(), T, widths, out);
}

}  // namespace

std::string linear_tensor_name(int64_t layer, LinearKind kind) {
  // In LinearKind's order.
  const char* names[] = {"attn_q",        "attn_k",        "attn_v",         "attn_output",   "ffn_gate",
                         "ffn_up",        "ffn_down",      "output",         "ffn_gate_inp",  "ffn_gate_exps",
                         "ffn_up_exps",   "ffn_down_exps", "ffn_gate_shexp", "ffn_up_shexp",  "ffn_down_shexp",
                         "ffn_gate_inp_shexp", "attn_q_a",   "attn_q_b",       "attn_kv_a_mqa", "attn_k_b",
                         "attn_v_b"};
  static_assert(std::size(names) == size_t(LinearKind::AttnVB) + 1);
  if (kind == LinearKind::Output) return "output.weight";
  if (kind == LinearKind::TiedOutput) return "token_embd.weight";
  return fmt::format("blk.{}.{}.weight", layer, names[int(kind)]);
}

void ActivationObserver::observe_stacked(int64_t layer, LinearKind kind, int64_t, int64_t, const float*, int64_t,
                                         int64_t) {
  fail("calibration (GPTQ, AWQ) does not support Mixture-of-Experts layers or latent attention yet ({}); use "
       "--method imatrix or rtn", linear_tensor_name(layer, kind));
}

void Model::forward(Backend& backend, const ForwardBatch& batch, const KvCacheView& kv,
                    ForwardScratch& s, float* logits, ActivationObserver* observer) const {
  if (shard_.tp_size != 1 || shard_.pp_size != 1) fail("internal: a model shard runs through the runner's stages");
  if (batch.num_tokens() == 0) return;
  LocalCommunicator local;
  embed(backend, batch, s, local);
  run_layers(backend, batch, kv, s, local, observer);
  head(backend, batch, s, logits, local, observer);
}

void Model::embed(Backend& backend, const ForwardBatch& batch, ForwardScratch& s, Communicator& tp) const {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  s.hidden.resize(size_t(T * c.n_embd));
  if (tp.size() == 1) {
    backend.get_rows(weights_.token_embd, batch.token_ids.data(), T, s.hidden.data());
  } else {
    // Vocabulary-parallel: the rank holding a token's row writes it, the others zeros; the sum is
    // the row exactly.
    const RankSlice& me = shard_.mine();
    std::fill(s.hidden.begin(), s.hidden.end(), 0.0f);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = batch.token_ids[size_t(t)];
      if (id < 0 || id >= c.n_vocab) fail("token id {} is outside the vocabulary (size {})", id, c.n_vocab);
      if (id < me.vocab_begin || id >= me.vocab_end) continue;
      const int32_t local = int32_t(id - me.vocab_begin);
      backend.get_rows(weights_.token_embd, &local, 1, s.hidden.data() + t * c.n_embd);
    }
    tp.all_reduce_sum(s.hidden);
  }
  if (c.embedding_scale != 1.0f) backend.scale(s.hidden.data(), c.embedding_scale, T * c.n_embd);
}

void Model::run_layers(Backend& backend, const ForwardBatch& batch, const KvCacheView& kv, ForwardScratch& s,
                       Communicator& tp, ActivationObserver* observer, LayerRange layers) const {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  if (T == 0) return;
  if (int64_t(kv.layers.size()) != c.n_layer) fail("internal: KV cache has the wrong layer count");
  if (int64_t(s.hidden.size()) != T * c.n_embd) fail("internal: the stage's input is not [T][n_embd]");
  const ModelShard& sh = shard_;
  const int64_t layer_begin = layers.begin >= 0 ? layers.begin : sh.layer_begin;
  const int64_t layer_end = layers.end >= 0 ? layers.end : sh.layer_end;
  if (layer_begin < sh.layer_begin || layer_end > sh.layer_end || layer_begin >= layer_end) {
    fail("internal: layers [{}, {}) outside the stage's [{}, {})", layer_begin, layer_end, sh.layer_begin,
         sh.layer_end);
  }
  const RankSlice& me = sh.mine();
  const int64_t n_head = me.n_head(), n_head_kv = me.n_head_kv(), n_ff = me.n_ff();
  const int64_t q_width = n_head * c.head_dim, kv_width = n_head_kv * c.head_dim;
  const bool split = tp.size() > 1;
  // Widths each rank contributes to the deterministic mode's gathers.
  std::vector<int64_t> q_widths, ff_widths, embd_widths, mla_value_widths;
  for (const RankSlice& r : sh.slices) {
    q_widths.push_back(r.n_head() * c.head_dim);
    mla_value_widths.push_back(r.n_head() * c.mla.v_dim);
    ff_widths.push_back(r.n_ff());
    embd_widths.push_back(r.n_embd());
  }
  const bool gather_mode = split && sh.tp_deterministic;

  s.normed.resize(size_t(T * c.n_embd));
  s.q.resize(size_t(T * q_width));
  s.k.resize(size_t(T * kv_width));
  s.v.resize(size_t(T * kv_width));
  s.attn.resize(size_t(T * q_width));
  s.proj.resize(size_t(T * c.n_embd));
  s.gate.resize(size_t(T * n_ff));
  if (gather_mode) s.gathered_rows.resize(size_t(T * std::max({c.q_width(), c.n_ff, c.attn_out_width()})));

  RopeParams rope;
  rope.n_rot = c.n_rot;
  rope.freq_scale = c.rope_freq_scale;
  rope.neox = c.rope_neox;
  rope.freq_factors = weights_.rope_factors_for(kv.spec.context_length, c);
  rope.attn_factor = c.rope_attn_factor;

  PagedAttentionArgs attn;
  attn.num_tokens = T;
  attn.positions = batch.positions.data();
  attn.token_seq = batch.token_seq.data();
  attn.block_size = kv.spec.block_size;
  attn.rotated = kv.spec.rotate;
  attn.n_head = int(n_head);
  attn.n_kv_head = int(n_head_kv);
  attn.head_dim = int(c.head_dim);
  attn.scale = c.attention_scale > 0.0f ? c.attention_scale : 1.0f / std::sqrt(float(c.head_dim));

  // A row-parallel matmul: partial sums over this rank's input columns, all-reduced; or, in the
  // deterministic mode, the full input gathered and this rank's output rows computed, gathered.
  auto row_parallel = [&](const WeightView& w, const float* x, std::span<const int64_t> in_widths, float* y) {
    if (!gather_mode) {
      backend.matmul(w, x, T, y);
      if (split) tp.all_reduce_sum(std::span<float>(y, size_t(T * c.n_embd)));
      return;
    }
    gather_rows(tp, x, T, in_widths, s, s.gathered_rows.data());
    s.own_rows.resize(size_t(T * me.n_embd()));
    backend.matmul(w, s.gathered_rows.data(), T, s.own_rows.data());
    gather_rows(tp, s.own_rows.data(), T, embd_widths, s, y);
  };

  // A norm of the model's kind over rows of `width` (in place allowed); a null weight is no norm
  // (OLMo 2's blocks read the residual stream as is).
  auto norm = [&](const float* x, const float* w, const float* b, int64_t rows, int64_t width, float* out) {
    if (w == nullptr) {
      if (out != x) std::copy_n(x, rows * width, out);
    } else if (c.norm == NormKind::Layer) {
      backend.layer_norm(x, w, b, rows, width, c.rms_eps, out);
    } else {
      backend.rms_norm(x, w, rows, width, c.rms_eps, out);
    }
  };
  // x += y; out = norm(x): the residual add fused with the next norm.
  auto add_norm = [&](float* x, const float* y, const float* w, const float* b, float* out) {
    if (w == nullptr) {
      backend.add(x, y, T * c.n_embd);
      std::copy_n(x, T * c.n_embd, out);
    } else if (c.norm == NormKind::Layer) {
      backend.add_layer_norm(x, y, w, b, T, c.n_embd, c.rms_eps, out);
    } else {
      backend.add_rms_norm(x, y, w, T, c.n_embd, c.rms_eps, out);
    }
  };
  // The q/k norm of `x` [T][heads * head_dim] (QkNorm in model_config.h).
  // Under --tp a norm over all heads at once (OLMo 2, OLMoE) sees every rank's heads: the rows
  // gathered whole (one copy of each KV head where ranks share one), normed as one process norms
  // them, this rank's heads taken back (bitwise one process's values, in either TP mode).
  auto whole_heads_norm = [&](float* x, const float* w, bool keys) {
    const int64_t hd = c.head_dim, width = (keys ? c.n_head_kv : c.n_head) * hd;
    std::vector<int64_t> widths;
    for (const RankSlice& r : sh.slices) widths.push_back((keys ? r.n_head_kv() : r.n_head()) * hd);
    const int64_t gathered_width = std::accumulate(widths.begin(), widths.end(), int64_t(0));
    s.gathered_rows.resize(std::max(s.gathered_rows.size(), size_t(T * gathered_width)));
    gather_rows(tp, x, T, widths, s, s.gathered_rows.data());
    // Each head once, in head order: the ranks' parts are in rank order, and ranks that share a
    // KV head hold the same copy of it (keep the first).
    s.qk_whole.resize(size_t(T * width));
    for (int64_t t = 0; t < T; ++t) {
      int64_t column = 0, next_head = 0;
      for (size_t r = 0; r < sh.slices.size(); ++r) {
        const int64_t first = keys ? sh.slices[r].kv_head_begin : sh.slices[r].q_head_begin;
        if (first == next_head && widths[r] > 0) {
          std::copy_n(s.gathered_rows.data() + t * gathered_width + column, widths[r],
                      s.qk_whole.data() + t * width + next_head * hd);
          next_head += widths[r] / hd;
        }
        column += widths[r];
      }
      if (next_head * hd != width) fail("internal: {} of {} heads gathered for the q/k norm", next_head, width / hd);
    }
    norm(s.qk_whole.data(), w, nullptr, T, width, s.qk_whole.data());
    const int64_t own = (keys ? me.kv_head_begin : me.q_head_begin) * hd, own_width = keys ? kv_width : q_width;
    for (int64_t t = 0; t < T; ++t) std::copy_n(s.qk_whole.data() + t * width + own, own_width, x + t * own_width);
  };
  auto qk_norm = [&](float* x, const float* w, bool keys) {
    const int64_t heads = keys ? n_head_kv : n_head;
    switch (c.qk_norm) {
      case QkNorm::None: return;
      case QkNorm::PerHead: norm(x, w, nullptr, T * heads, c.head_dim, x); return;
      case QkNorm::Full:
        if (split) return whole_heads_norm(x, w, keys);
        norm(x, w, nullptr, T, heads * c.head_dim, x);
        return;
      case QkNorm::PerHeadEach:
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t h = 0; h < heads; ++h) {
            float* row = x + (t * heads + h) * c.head_dim;
            norm(row, w + h * c.head_dim, nullptr, 1, c.head_dim, row);
          }
        }
        return;
    }
  };
  // The MLP of layer l over s.normed into s.proj: down(act(gate h) * up h), or down(act(up h)).
  auto dense_mlp = [&](int64_t il, const LayerWeights& l, GatedActivation act) {
    if (observer) {
      if (c.gated_ffn) observer->observe(il, LinearKind::FfnGate, s.normed.data(), T, c.n_embd);
      observer->observe(il, LinearKind::FfnUp, s.normed.data(), T, c.n_embd);
    }
    if (!c.gated_ffn) {
      backend.matmul(l.w_up, s.normed.data(), T, s.gate.data());
      if (l.b_up) backend.add_row(s.gate.data(), l.b_up, T, n_ff);
      backend.activate(act, s.gate.data(), T * n_ff);
    } else if (l.b_gate || l.b_up) {
      // Biases sit between the matmuls and the activation: the fused path cannot take them.
      s.up.resize(size_t(T * n_ff));
      const WeightView gate_up[2] = {l.w_gate, l.w_up};
      float* const outs[2] = {s.gate.data(), s.up.data()};
      backend.matmul_many(gate_up, s.normed.data(), T, outs);
      if (l.b_gate) backend.add_row(s.gate.data(), l.b_gate, T, n_ff);
      if (l.b_up) backend.add_row(s.up.data(), l.b_up, T, n_ff);
      if (act == GatedActivation::Silu) {
        backend.silu_mul(s.gate.data(), s.up.data(), T * n_ff, s.gate.data());
      } else {
        backend.gelu_mul(s.gate.data(), s.up.data(), T * n_ff, s.gate.data());
      }
    } else {
      backend.gated_ffn(l.w_gate, l.w_up, act, s.normed.data(), T, s.gate.data());
    }
    if (observer) observer->observe(il, LinearKind::FfnDown, s.gate.data(), T, c.n_ff);
    row_parallel(l.w_down, s.gate.data(), ff_widths, s.proj.data());
    if (l.b_down) backend.add_row(s.proj.data(), l.b_down, T, c.n_embd);
  };
  // The layer's MLP or MoE block over s.normed into s.proj, with its post-norm and residual scale.
  auto mlp = [&](int64_t il, const LayerWeights& l) {
    const GatedActivation act =
        c.activation == Activation::GeluTanh ? GatedActivation::GeluTanh : GatedActivation::Silu;
    if (l.moe.has_experts()) {
      // Mixture of Experts (moe_ffn.h) instead of the dense MLP. Split over ranks as the MLP is
      // (Model::split_moe_layer): partial sums all-reduced, or this rank's output rows gathered.
      if (!gather_mode) {
        moe_ffn(backend, c.moe, l.moe, act, s.normed.data(), T, s.moe, s.proj.data(), {observer, il});
        if (split) tp.all_reduce_sum(std::span<float>(s.proj.data(), size_t(T * c.n_embd)));
      } else {
        s.own_rows.resize(size_t(T * me.n_embd()));
        moe_ffn(backend, c.moe, l.moe, act, s.normed.data(), T, s.moe, s.own_rows.data(), {observer, il});
        gather_rows(tp, s.own_rows.data(), T, embd_widths, s, s.proj.data());
      }
    } else {
      dense_mlp(il, l, act);
    }
    if (c.post_norms) norm(s.proj.data(), l.post_ffn_norm, nullptr, T, c.n_embd, s.proj.data());
    if (c.residual_scale != 1.0f) backend.scale(s.proj.data(), c.residual_scale, T * c.n_embd);
  };
  RopeParams no_rope = rope;  // a NoPE layer's (n_rot 0: its sinks need no re-rotation)
  no_rope.n_rot = 0;
  attn.softcap = c.attn_logit_softcap;

  // After attention's output projection (s.proj): its post-norm and scale, the residual add, the
  // MLP, and the residual add fused with the next layer's input norm.
  auto finish_attention = [&](int64_t il, const LayerWeights& l) {
    if (c.post_norms) norm(s.proj.data(), l.post_attn_norm, nullptr, T, c.n_embd, s.proj.data());
    if (c.residual_scale != 1.0f) backend.scale(s.proj.data(), c.residual_scale, T * c.n_embd);
    if (c.parallel_block) {
      // x += o; the MLP reads the same normed input as attention did.
      backend.add(s.hidden.data(), s.proj.data(), T * c.n_embd);
    } else {
      // x += o; h = norm(x) for the MLP.
      add_norm(s.hidden.data(), s.proj.data(), l.ffn_norm, l.ffn_norm_b, s.normed.data());
    }
    mlp(il, l);
    if (il + 1 < layer_end) {
      // x += m; h = norm(x) for the next layer's attention.
      const LayerWeights& next = weights_.layers[size_t(il + 1)];
      add_norm(s.hidden.data(), s.proj.data(), next.attn_norm, next.attn_norm_b, s.normed.data());
    } else {
      // The stage's last layer (the next stage, or the head, normalizes): the same sum as fused.
      backend.add(s.hidden.data(), s.proj.data(), T * c.n_embd);
    }
  };

  // The first layer's input norm; every later one is fused with the residual add before it.
  const LayerWeights& first = weights_.layers[size_t(layer_begin)];
  norm(s.hidden.data(), first.attn_norm, first.attn_norm_b, T, c.n_embd, s.normed.data());
  for (int64_t il = layer_begin; il < layer_end; ++il) {
    const LayerWeights& l = weights_.layers[size_t(il)];
    const bool sliding = c.is_sliding(il);
    // Attention block; s.normed holds the layer's input norm of x.
    // Every weight view is read after the observer has seen its input: an observer may replace
    // the matrix in between (GPTQ quantizes layer by layer that way).
    // The layer's KV-cache group decides where its K/V live and what it sees.
    const int g = kv.layout.layer_group[size_t(il)];
    const KvGroupBatch& group = batch.kv_groups[size_t(g)];
    attn.block_tables = group.block_tables.data();
    attn.max_blocks_per_seq = group.max_blocks_per_seq;
    attn.window = kv.layout.group_windows[size_t(g)];
    attn.sinks = kv.layout.group_sinks[size_t(g)];
    attn.sink_rope = c.has_rope(il) ? &rope : &no_rope;
    if (c.mla.enabled()) {
      // Latent attention (mla_attention.h): one shared latent KV head, also the value.
      const LayerObserver seen{observer, il};
      rope.freq_base = c.rope_freq_base;
      mla_queries_and_keys(backend, c, l.mla, l.wq, s.normed.data(), T, batch.positions.data(), rope, s.mla, s.q.data(),
                           s.k.data(), seen);
      backend.kv_write(kv.layers[size_t(il)], s.k.data(), s.k.data(), group.slot_mapping.data(), T, 1,
                       int(c.head_dim));
      backend.paged_attention(attn, s.q.data(), kv.layers[size_t(il)], s.attn.data());
      const int64_t values_width = n_head * c.mla.v_dim;  // this rank's heads' values
      s.values.resize(size_t(T * values_width));
      mla_values(backend, c, l.mla, s.attn.data(), T, s.mla, s.values.data(), seen);
      seen.observe(LinearKind::AttnOutput, s.values.data(), T, values_width);
      row_parallel(l.wo, s.values.data(), mla_value_widths, s.proj.data());
      if (l.bo) backend.add_row(s.proj.data(), l.bo, T, c.n_embd);
      finish_attention(il, l);
      continue;
    }
    if (observer) {
      for (LinearKind k : {LinearKind::AttnQ, LinearKind::AttnK, LinearKind::AttnV}) {
        observer->observe(il, k, s.normed.data(), T, c.n_embd);
      }
    }
    const WeightView qkv[3] = {l.wq, l.wk, l.wv};
    float* const qkv_out[3] = {s.q.data(), s.k.data(), s.v.data()};
    backend.matmul_many(qkv, s.normed.data(), T, qkv_out);
    if (l.bq) backend.add_row(s.q.data(), l.bq, T, q_width);
    if (l.bk) backend.add_row(s.k.data(), l.bk, T, kv_width);
    if (l.bv) backend.add_row(s.v.data(), l.bv, T, kv_width);
    qk_norm(s.q.data(), l.q_norm, /*keys=*/false);
    qk_norm(s.k.data(), l.k_norm, /*keys=*/true);
    // Gemma 3's local layers have their own RoPE base and no scaling (rope_scaling is global-only).
    const bool local_rope = sliding && c.rope_freq_base_sliding > 0.0f;
    rope.freq_base = local_rope ? c.rope_freq_base_sliding : c.rope_freq_base;
    rope.freq_scale = local_rope ? 1.0f : c.rope_freq_scale;
    if (c.has_rope(il)) {
      backend.rope(s.q.data(), batch.positions.data(), T, int(n_head), int(c.head_dim), rope);
      backend.rope(s.k.data(), batch.positions.data(), T, int(n_head_kv), int(c.head_dim), rope);
    }
    if (kv.spec.rotate) {
      // Hadamard-rotate each head of Q and K: q . k is unchanged, K's outliers are spread before
      // it is quantized into the cache.
      backend.hadamard(s.q.data(), T * n_head, int(c.head_dim));
      backend.hadamard(s.k.data(), T * n_head_kv, int(c.head_dim));
    }
    backend.kv_write(kv.layers[size_t(il)], s.k.data(), s.v.data(), group.slot_mapping.data(), T,
                     int(n_head_kv), int(c.head_dim));
    backend.paged_attention(attn, s.q.data(), kv.layers[size_t(il)], s.attn.data());
    if (observer) observer->observe(il, LinearKind::AttnOutput, s.attn.data(), T, c.q_width());
    row_parallel(l.wo, s.attn.data(), q_widths, s.proj.data());
    if (l.bo) backend.add_row(s.proj.data(), l.bo, T, c.n_embd);
    finish_attention(il, l);
  }
}

void Model::head(Backend& backend, const ForwardBatch& batch, ForwardScratch& s, float* logits, Communicator& tp,
                 ActivationObserver* observer) const {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  // Only the requested rows go through the final norm and the (large) output head.
  const int64_t n_out = int64_t(batch.logits_indices.size());
  if (n_out == 0) return;
  s.logits_in.resize(size_t(n_out * c.n_embd));
  for (int64_t i = 0; i < n_out; ++i) {
    const int32_t row = batch.logits_indices[size_t(i)];
    if (row < 0 || row >= T) fail("internal: logits index {} outside batch of {}", row, T);
    std::copy_n(s.hidden.data() + int64_t(row) * c.n_embd, c.n_embd,
                s.logits_in.data() + i * c.n_embd);
  }
  if (c.norm == NormKind::Layer) {
    backend.layer_norm(s.logits_in.data(), weights_.output_norm, weights_.output_norm_b, n_out, c.n_embd,
                       c.rms_eps, s.logits_in.data());
  } else {
    backend.rms_norm(s.logits_in.data(), weights_.output_norm, n_out, c.n_embd, c.rms_eps, s.logits_in.data());
  }
  if (observer) {
    observer->observe(-1, weights_.tied_output ? LinearKind::TiedOutput : LinearKind::Output, s.logits_in.data(),
                      n_out, c.n_embd);
  }
  if (tp.size() == 1) {
    const WeightView& output = batch.head != nullptr ? *batch.head : weights_.output;
    if (output.cols != c.n_embd) fail("internal: an output head of {} columns for {} embeddings", output.cols, c.n_embd);
    backend.matmul(output, s.logits_in.data(), n_out, logits);
    if (c.logit_scale != 1.0f) backend.scale(logits, c.logit_scale, n_out * output.rows);
    if (c.final_logit_softcap > 0.0f) backend.softcap(logits, c.final_logit_softcap, n_out * output.rows);
    return;
  }
  if (batch.head != nullptr) fail("internal: an output head over part of the vocabulary runs in one process only");
  // Vocabulary-parallel head: this rank's logits columns, gathered onto tensor-parallel rank 0.
  const int64_t v_local = shard_.mine().n_vocab();
  s.logits_local.resize(size_t(n_out * v_local));
  backend.matmul(weights_.output, s.logits_in.data(), n_out, s.logits_local.data());
  if (c.logit_scale != 1.0f) backend.scale(s.logits_local.data(), c.logit_scale, n_out * v_local);
  if (c.final_logit_softcap > 0.0f) backend.softcap(s.logits_local.data(), c.final_logit_softcap, n_out * v_local);
  std::vector<int64_t> counts, widths;
  for (const RankSlice& r : shard_.slices) {
    counts.push_back(n_out * r.n_vocab());
    widths.push_back(r.n_vocab());
  }
  if (tp.rank() == 0) s.gathered.resize(size_t(n_out * c.n_vocab));
  tp.gather(s.logits_local, s.gathered, counts, 0);
  if (tp.rank() == 0) interleave_rows(s.gathered.data(), n_out, widths, logits);
}

}  // namespace kestrel
