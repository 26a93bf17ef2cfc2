// The decoder forward pass shared by every architecture, over a flattened batch (all sequences'
// tokens in one [T, width] activation matrix). Per layer:
//   h = RMSNorm(x); q, k, v = h W (+ bias); [per-head RMSNorm of q, k]; RoPE; [Hadamard rotation
//   of q, k]; write K/V to the paged cache in its types; paged attention (windowed on sliding
//   layers, rolling window with sinks when streaming); o = attn W_o; [RMSNorm(o)]; x += o
//   h = RMSNorm(x); m = W_down (act(h W_gate) * h W_up); [RMSNorm(m)]; x += m
// then the final RMSNorm and the output head only for the rows that need logits. Bracketed steps
// and the activation follow the config's feature flags (model_config.h): architectures differ in
// configuration, never in a copy of this code.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "model/model.h"

namespace kestrel {

std::string linear_tensor_name(int64_t layer, LinearKind kind) {
  const char* names[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  if (kind == LinearKind::Output) return "output.weight";
  return fmt::format("blk.{}.{}.weight", layer, names[int(kind)]);
}

void Model::forward(Backend& backend, const ForwardBatch& batch, const KvCacheView& kv,
                    ForwardScratch& s, float* logits, ActivationObserver* observer) const {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  if (T == 0) return;
  if (int64_t(kv.layers.size()) != c.n_layer) fail("internal: KV cache has the wrong layer count");

  s.hidden.resize(size_t(T * c.n_embd));
  s.normed.resize(size_t(T * c.n_embd));
  s.q.resize(size_t(T * c.q_width()));
  s.k.resize(size_t(T * c.kv_width()));
  s.v.resize(size_t(T * c.kv_width()));
  s.attn.resize(size_t(T * c.q_width()));
  s.proj.resize(size_t(T * c.n_embd));
  s.gate.resize(size_t(T * c.n_ff));

  backend.get_rows(weights_.token_embd, batch.token_ids.data(), T, s.hidden.data());
  if (c.embedding_scale != 1.0f) backend.scale(s.hidden.data(), c.embedding_scale, T * c.n_embd);

  RopeParams rope;
  rope.n_rot = c.n_rot;
  rope.freq_scale = c.rope_freq_scale;
  rope.neox = c.rope_neox;
  rope.freq_factors = weights_.rope_freq_factors;

  PagedAttentionArgs attn;
  attn.num_tokens = T;
  attn.positions = batch.positions.data();
  attn.token_seq = batch.token_seq.data();
  attn.block_size = kv.spec.block_size;
  attn.rotated = kv.spec.rotate;
  attn.n_head = int(c.n_head);
  attn.n_kv_head = int(c.n_head_kv);
  attn.head_dim = int(c.head_dim);
  attn.scale = c.attention_scale > 0.0f ? c.attention_scale : 1.0f / std::sqrt(float(c.head_dim));

  // The first layer's input norm; every later one is fused with the residual add before it.
  backend.rms_norm(s.hidden.data(), weights_.layers[0].attn_norm, T, c.n_embd, c.rms_eps, s.normed.data());
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = weights_.layers[size_t(il)];
    const bool sliding = c.is_sliding(il);
    // Attention block; s.normed holds RMSNorm(x) with this layer's attn_norm.
    // Every weight view is read after the observer has seen its input: an observer may replace
    // the matrix in between (GPTQ quantizes layer by layer that way).
    if (observer) {
      for (LinearKind k : {LinearKind::AttnQ, LinearKind::AttnK, LinearKind::AttnV}) {
        observer->observe(il, k, s.normed.data(), T, c.n_embd);
      }
    }
    const WeightView qkv[3] = {l.wq, l.wk, l.wv};
    float* const qkv_out[3] = {s.q.data(), s.k.data(), s.v.data()};
    backend.matmul_many(qkv, s.normed.data(), T, qkv_out);
    if (c.qkv_bias) {
      backend.add_row(s.q.data(), l.bq, T, c.q_width());
      backend.add_row(s.k.data(), l.bk, T, c.kv_width());
      backend.add_row(s.v.data(), l.bv, T, c.kv_width());
    }
    if (c.qk_norm) {
      backend.rms_norm(s.q.data(), l.q_norm, T * c.n_head, c.head_dim, c.rms_eps, s.q.data());
      backend.rms_norm(s.k.data(), l.k_norm, T * c.n_head_kv, c.head_dim, c.rms_eps, s.k.data());
    }
    // Gemma 3's local layers have their own RoPE base and no scaling (rope_scaling is global-only).
    const bool local_rope = sliding && c.rope_freq_base_sliding > 0.0f;
    rope.freq_base = local_rope ? c.rope_freq_base_sliding : c.rope_freq_base;
    rope.freq_scale = local_rope ? 1.0f : c.rope_freq_scale;
    backend.rope(s.q.data(), batch.positions.data(), T, int(c.n_head), int(c.head_dim), rope);
    backend.rope(s.k.data(), batch.positions.data(), T, int(c.n_head_kv), int(c.head_dim), rope);
    if (kv.spec.rotate) {
      // Hadamard-rotate each head of Q and K: q . k is unchanged, K's outliers are spread before
      // it is quantized into the cache.
      backend.hadamard(s.q.data(), T * c.n_head, int(c.head_dim));
      backend.hadamard(s.k.data(), T * c.n_head_kv, int(c.head_dim));
    }
    // The layer's KV-cache group decides where its K/V live and what it sees.
    const int g = kv.layout.layer_group[size_t(il)];
    const KvGroupBatch& group = batch.kv_groups[size_t(g)];
    backend.kv_write(kv.layers[size_t(il)], s.k.data(), s.v.data(), group.slot_mapping.data(), T,
                     int(c.n_head_kv), int(c.head_dim));
    attn.block_tables = group.block_tables.data();
    attn.max_blocks_per_seq = group.max_blocks_per_seq;
    attn.window = kv.layout.group_windows[size_t(g)];
    attn.sinks = kv.layout.group_sinks[size_t(g)];
    attn.sink_rope = &rope;
    backend.paged_attention(attn, s.q.data(), kv.layers[size_t(il)], s.attn.data());
    if (observer) observer->observe(il, LinearKind::AttnOutput, s.attn.data(), T, c.q_width());
    backend.matmul(l.wo, s.attn.data(), T, s.proj.data());
    if (c.post_norms) {
      backend.rms_norm(s.proj.data(), l.post_attn_norm, T, c.n_embd, c.rms_eps, s.proj.data());
    }
    // x += o; h = RMSNorm(x) for the MLP.
    backend.add_rms_norm(s.hidden.data(), s.proj.data(), l.ffn_norm, T, c.n_embd, c.rms_eps, s.normed.data());
    // Gated MLP block: down(act(gate(h)) * up(h)).
    if (observer) {
      observer->observe(il, LinearKind::FfnGate, s.normed.data(), T, c.n_embd);
      observer->observe(il, LinearKind::FfnUp, s.normed.data(), T, c.n_embd);
    }
    backend.gated_ffn(l.w_gate, l.w_up,
                      c.activation == Activation::GeluTanh ? GatedActivation::GeluTanh : GatedActivation::Silu,
                      s.normed.data(), T, s.gate.data());
    if (observer) observer->observe(il, LinearKind::FfnDown, s.gate.data(), T, c.n_ff);
    backend.matmul(l.w_down, s.gate.data(), T, s.proj.data());
    if (c.post_norms) {
      backend.rms_norm(s.proj.data(), l.post_ffn_norm, T, c.n_embd, c.rms_eps, s.proj.data());
    }
    if (il + 1 < c.n_layer) {
      // x += m; h = RMSNorm(x) for the next layer's attention.
      backend.add_rms_norm(s.hidden.data(), s.proj.data(), weights_.layers[size_t(il + 1)].attn_norm, T,
                           c.n_embd, c.rms_eps, s.normed.data());
    } else {
      backend.add(s.hidden.data(), s.proj.data(), T * c.n_embd);
    }
  }

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
  backend.rms_norm(s.logits_in.data(), weights_.output_norm, n_out, c.n_embd, c.rms_eps,
                   s.logits_in.data());
  if (observer && !weights_.tied_output) {
    observer->observe(-1, LinearKind::Output, s.logits_in.data(), n_out, c.n_embd);
  }
  backend.matmul(weights_.output, s.logits_in.data(), n_out, logits);
  if (c.final_logit_softcap > 0.0f) {
    backend.softcap(logits, c.final_logit_softcap, n_out * c.n_vocab);
  }
}

}  // namespace kestrel
