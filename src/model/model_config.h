// Hyper-parameters of a decoder-only transformer, read from GGUF metadata, plus the feature flags
// that tell the one shared forward pass what each architecture does differently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/moe_config.h"

namespace kestrel::gguf {
class GgufFile;
}

namespace kestrel {

enum class Activation { Silu, GeluTanh };

// Rms: x / rms(x) * w. Layer: (x - mean(x)) / sqrt(var(x) + eps) * w (+ b).
enum class NormKind { Rms, Layer };

// Normalization of the queries and keys before RoPE. PerHead: every head with one shared weight
// [head_dim] (Qwen3, Gemma 3); PerHeadEach: each head its own weight [n_head][head_dim] (Cohere,
// StableLM 2 12B); Full: the whole projection [n_head * head_dim] at once (OLMo 2).
enum class QkNorm { None, PerHead, PerHeadEach, Full };

// Multi-head latent attention (DeepSeek-V2, `<arch>.attention.kv_lora_rank` > 0), run in the
// absorbed form llama.cpp uses: every query head attends to one shared latent key per token,
// [kv_lora_rank normed latent | rope_dim rotary part], whose first kv_lora_rank values are also the
// value. So the cache holds one KV head of head_dim = kv_lora_rank + rope_dim per token (not
// n_head heads of nope_dim + rope_dim keys and v_dim values), and attention_scale is
// 1 / sqrt(nope_dim + rope_dim), the scale of the decompressed heads (times YaRN's mscale^2).
struct MlaConfig {
  int64_t kv_lora_rank = 0;  // the latent's width; 0: not MLA
  int64_t q_lora_rank = 0;   // queries through a latent of this width (attn_q_a/_b); 0: one attn_q
  int64_t nope_dim = 0;      // a query/key head's part without RoPE (qk_nope_head_dim)
  int64_t rope_dim = 0;      // its rotary part (qk_rope_head_dim, = n_rot)
  int64_t v_dim = 0;         // a value head after attn_v_b (v_head_dim)

  bool enabled() const { return kv_lora_rank > 0; }
  int64_t q_head_dim() const { return nope_dim + rope_dim; }  // attn_q's rows per head
};

struct ModelConfig {
  std::string architecture;  // general.architecture, e.g. "llama", "qwen3", "gemma3"
  std::string name;          // general.name, if any
  int64_t n_vocab = 0;
  int64_t n_embd = 0;        // hidden size
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;      // key/value length per head (MLA: the latent key, MlaConfig)
  int64_t n_ff = 0;          // MLP intermediate size
  int64_t n_ctx_train = 0;   // context length the model was trained for
  float rms_eps = 1e-5f;
  int n_rot = 0;             // rotary dimensions per head
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  bool rope_neox = false;    // NeoX pairs (i, i + n_rot/2) instead of (2i, 2i + 1)
  // LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini): the file's rope_factors_long are used when the
  // context a cache serves exceeds rope_orig_ctx, rope_factors_short otherwise (as llama.cpp
  // picks them), and cos/sin are scaled by rope_attn_factor either way.
  int64_t rope_orig_ctx = 0;        // rope.scaling.original_context_length; 0: not given
  float rope_attn_factor = 1.0f;    // rope.scaling.attn_factor (times YaRN's magnitude)
  // YaRN (rope.scaling.type "yarn"): per rotary pair frequency divisors [n_rot / 2] that mix
  // the original and the interpolated frequency (model_config.cpp, read_yarn); empty: no YaRN.
  std::vector<float> rope_yarn_divisors;
  float rope_yarn_kq_scale = 1.0f;  // DeepSeek-V2 under YaRN: the logits' extra scale (mscale^2)

  // Architecture features (all off for Llama). Biases on any linear layer and on the norms are
  // used wherever the file has them (StableLM, Starcoder2, Granite); qkv_bias makes q/k/v's required.
  bool qkv_bias = false;          // Qwen2: bias on the q/k/v projections
  NormKind norm = NormKind::Rms;  // every norm of the model (the q/k norms too)
  QkNorm qk_norm = QkNorm::None;  // Qwen3, Gemma 3, OLMo 2, Cohere, StableLM 2 12B
  bool input_norms = true;        // false (OLMo 2): attention and MLP read the residual stream as is
  bool post_norms = false;        // Gemma 2/3, OLMo 2: norm on the attention and MLP outputs before the residual add
  bool parallel_block = false;    // Cohere, StableLM 2 12B: x += attn(h) + mlp(h), one h = norm(x)
  bool gated_ffn = true;          // false (Starcoder2): down(act(up(h)))
  Activation activation = Activation::Silu;  // gated MLP: act(gate) * up
  float embedding_scale = 1.0f;   // Gemma: sqrt(n_embd); Granite: embedding_multiplier
  float attention_scale = 0.0f;   // 0: 1 / sqrt(head_dim)
  float attn_logit_softcap = 0.0f;  // Gemma 2: scores = cap * tanh(scores / cap); 0: none
  float residual_scale = 1.0f;    // Granite: attention and MLP outputs scaled before the residual add
  float logit_scale = 1.0f;       // Granite (1 / logits_scaling), Cohere: final logits multiplied
  std::vector<bool> layer_rope;   // [n_layer] false for layers without RoPE (SmolLM3); empty: all
  int sliding_window = 0;         // tokens seen by sliding-window layers; 0: none
  std::vector<bool> layer_sliding;  // [n_layer] true for sliding-window (local) layers
  float rope_freq_base_sliding = 0.0f;  // RoPE base of local layers (Gemma 3); 0: same as global
  float final_logit_softcap = 0.0f;     // 0: none
  MoeConfig moe;                        // Mixture-of-Experts (Mixtral, Qwen2/3-MoE); disabled for dense models
  MlaConfig mla;                        // DeepSeek-V2's latent attention; disabled otherwise

  int64_t q_width() const { return n_head * head_dim; }  // MLA: the absorbed queries
  // attn_output's input width: the heads' values (MLA: after attn_v_b).
  int64_t attn_out_width() const { return mla.enabled() ? n_head * mla.v_dim : q_width(); }
  int64_t kv_width() const { return n_head_kv * head_dim; }
  bool has_rope(int64_t layer) const { return layer_rope.empty() || layer_rope[size_t(layer)]; }
  bool is_sliding(int64_t layer) const {
    return !layer_sliding.empty() && layer_sliding[size_t(layer)] && sliding_window > 0;
  }
};

// Reads the hyper-parameters of any supported architecture (keys under `<arch>.`). An unknown
// architecture, a missing key or inconsistent values are errors naming the file and the key.
ModelConfig read_model_config(const gguf::GgufFile& file);

// Names of the architectures Kestrel can run.
const std::vector<std::string>& supported_architectures();

}  // namespace kestrel
