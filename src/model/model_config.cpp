#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "core/error.h"
#include "loader/gguf_reader.h"

namespace kestrel {
namespace {

int64_t require_positive(const gguf::GgufFile& file, const std::string& key) {
  const uint64_t value = file.require_uint(key);
  if (value == 0 || value > (uint64_t(1) << 31)) {
    fail("{}: metadata key '{}' has an invalid value {}", file.name(), key, value);
  }
  return int64_t(value);
}

int64_t optional_positive(const gguf::GgufFile& file, const std::string& key, int64_t fallback) {
  return file.get_uint(key) ? require_positive(file, key) : fallback;
}

// llama.cpp's YaRN multiplier of a context `scale` times the original: 1 + 0.1 m ln(scale).
float yarn_mscale(float scale, float m) { return scale <= 1.0f ? 1.0f : 1.0f + 0.1f * m * std::log(scale); }

// YaRN (rope.scaling.type "yarn") as llama.cpp applies it. Rotary pair i's angle is
// pos * base^(-2i/n_rot) * (mix_i + (1 - mix_i) / factor), where mix_i ramps from 1 (pairs that
// turn fewer than beta_fast times over the original context: kept) down to 0 (more than beta_slow
// times: interpolated by the factor), times ext_factor; so it is a per-pair frequency divisor
// (rope_yarn_divisors). The magnitudes follow llama.cpp's context set-up (yarn_attn_factor: with
// ext_factor != 0, mscale(factor, m) / mscale(factor, L) for rope.scaling.yarn_log_multiplier L,
// m = L for DeepSeek-V2 (whose converter writes 0.1 L) and 1 otherwise, or mscale(factor, 1)
// without L, then divided by 1 + 0.1 ln factor; times rope.scaling.attn_factor) and its rope
// kernel (cos and sin times yarn_attn_factor, times 1 + 0.1 ln factor again when ext_factor != 0).
void read_yarn(const gguf::GgufFile& file, ModelConfig& c, float factor) {
  const std::string p = c.architecture + ".rope.scaling.";
  const float beta_fast = float(file.get_float(p + "yarn_beta_fast").value_or(32.0));
  const float beta_slow = float(file.get_float(p + "yarn_beta_slow").value_or(1.0));
  float ext_factor = float(file.get_float(p + "yarn_ext_factor").value_or(-1.0));
  if (ext_factor < 0.0f) ext_factor = 1.0f;  // llama.cpp: negative means not set, 1 under YaRN
  float log_mul = float(file.get_float(p + "yarn_log_multiplier").value_or(0.0));
  if (c.architecture == "deepseek2") log_mul /= 0.1f;
  if (!(beta_fast > 0.0f) || !(beta_slow > 0.0f) || !std::isfinite(ext_factor) || !std::isfinite(log_mul)) {
    fail("{}: YaRN parameters out of range (beta_fast {}, beta_slow {}, ext_factor {}, log multiplier {})", file.name(),
         beta_fast, beta_slow, ext_factor, log_mul);
  }
  const float n_ctx_orig = float(c.rope_orig_ctx > 0 ? c.rope_orig_ctx : c.n_ctx_train);
  const float n_rot = float(c.n_rot), base = c.rope_freq_base;
  auto correction_dim = [&](float rotations) {
    return n_rot * std::log(n_ctx_orig / (rotations * 2.0f * std::numbers::pi_v<float>)) / (2.0f * std::log(base));
  };
  const float low = std::max(0.0f, std::floor(correction_dim(beta_fast)));
  const float high = std::min(n_rot - 1.0f, std::ceil(correction_dim(beta_slow)));
  c.rope_yarn_divisors.resize(size_t(c.n_rot / 2));
  for (int i = 0; i < c.n_rot / 2; ++i) {
    const float y = (float(i) - low) / std::max(0.001f, high - low);
    const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * ext_factor;
    c.rope_yarn_divisors[size_t(i)] = 1.0f / (mix + (1.0f - mix) / factor);
  }
  const float log_gain = 1.0f + 0.1f * std::log(factor);  // llama.cpp's unclamped 1 + 0.1 ln(1 / freq_scale)
  float yarn_attn_factor = 1.0f;
  if (ext_factor != 0.0f) {
    if (log_mul != 0.0f) {
      const float m = c.architecture == "deepseek2" && log_mul != 1.0f ? log_mul : 1.0f;
      yarn_attn_factor = yarn_mscale(factor, m) / yarn_mscale(factor, log_mul);
    } else {
      yarn_attn_factor = yarn_mscale(factor, 1.0f);
    }
    yarn_attn_factor /= log_gain;
  }
  yarn_attn_factor *= c.rope_attn_factor;
  c.rope_attn_factor = yarn_attn_factor * (ext_factor != 0.0f ? log_gain : 1.0f);
  // DeepSeek-V2's logits scale (llama.cpp's kq_scale): (yarn_attn_factor * log_gain * (1 + 0.1 L
  // ln factor))^2.
  const float kq_mscale = yarn_attn_factor * log_gain * (1.0f + 0.1f * log_mul * std::log(factor));
  c.rope_yarn_kq_scale = kq_mscale * kq_mscale;
}

// The keys every Llama-like architecture shares.
void read_common(const gguf::GgufFile& file, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  c.n_embd = require_positive(file, p + "embedding_length");
  c.n_layer = require_positive(file, p + "block_count");
  // Multi-token-prediction layers (DeepSeek-V3's nextn, stored after the main stack): llama.cpp
  // leaves the last nextn_predict_layers blocks out of the forward pass, and so does Kestrel.
  if (const auto nextn = file.get_uint(p + "nextn_predict_layers"); nextn && *nextn > 0) {
    if (int64_t(*nextn) >= c.n_layer) {
      fail("{}: {}nextn_predict_layers {} leaves none of the {} blocks", file.name(), p, *nextn, c.n_layer);
    }
    c.n_layer -= int64_t(*nextn);
  }
  c.n_ff = require_positive(file, p + "feed_forward_length");
  c.n_head = require_positive(file, p + "attention.head_count");
  c.n_head_kv = optional_positive(file, p + "attention.head_count_kv", c.n_head);
  c.n_ctx_train = require_positive(file, p + "context_length");
  if (c.n_embd % c.n_head != 0 && !file.get_uint(p + "attention.key_length")) {
    fail("{}: {}embedding_length {} is not divisible by attention.head_count {}", file.name(), p,
         c.n_embd, c.n_head);
  }
  c.head_dim = optional_positive(file, p + "attention.key_length", c.n_embd / c.n_head);
  // MLA's value is the first kv_lora_rank values of its latent key (read_mla).
  if (auto value_length = file.get_uint(p + "attention.value_length");
      value_length && int64_t(*value_length) != c.head_dim && !file.get_uint(p + "attention.kv_lora_rank")) {
    fail("{}: attention.value_length {} differs from key_length {}; not supported", file.name(),
         *value_length, c.head_dim);
  }
  if (c.n_head % c.n_head_kv != 0) {
    fail("{}: attention.head_count {} is not a multiple of attention.head_count_kv {}", file.name(),
         c.n_head, c.n_head_kv);
  }
  // LayerNorm models store their epsilon under another key.
  const std::string eps_key = p + (file.find(p + "attention.layer_norm_rms_epsilon") != nullptr
                                       ? "attention.layer_norm_rms_epsilon"
                                       : "attention.layer_norm_epsilon");
  c.rms_eps = float(file.require_float(eps_key));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) {
    fail("{}: {} {} is out of range", file.name(), eps_key, c.rms_eps);
  }
  c.n_rot = int(file.get_uint(p + "rope.dimension_count").value_or(uint64_t(c.head_dim)));
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    fail("{}: rope.dimension_count {} must be even and at most the head size {}", file.name(),
         c.n_rot, c.head_dim);
  }
  c.rope_freq_base = float(file.get_float(p + "rope.freq_base").value_or(10000.0));
  c.rope_orig_ctx = int64_t(file.get_uint(p + "rope.scaling.original_context_length").value_or(0));
  c.rope_attn_factor = float(file.get_float(p + "rope.scaling.attn_factor").value_or(1.0));
  if (!(c.rope_attn_factor > 0.0f) || !std::isfinite(c.rope_attn_factor)) {
    fail("{}: rope.scaling.attn_factor {} must be positive", file.name(), c.rope_attn_factor);
  }
  if (auto type = file.get_string(p + "rope.scaling.type"); type && *type != "none") {
    if (*type != "linear" && *type != "yarn") {
      fail("{}: rope.scaling.type '{}' is not supported (supported: none, linear, yarn)", file.name(), *type);
    }
    const double factor = file.require_float(p + "rope.scaling.factor");
    if (!(factor > 0.0) || !std::isfinite(factor)) {
      fail("{}: rope.scaling.factor {} must be positive", file.name(), factor);
    }
    if (*type == "linear") {
      c.rope_freq_scale = float(1.0 / factor);
    } else {
      read_yarn(file, c, float(factor));
    }
  }
  if (auto window = file.get_uint(p + "attention.sliding_window"); window && *window > 0) {
    c.sliding_window = int(std::min<uint64_t>(*window, uint64_t(1) << 30));
    c.layer_sliding.assign(size_t(c.n_layer), true);  // every layer, unless the arch says otherwise
  }
}

// Which layers use the sliding window: `<arch>.attention.sliding_window_pattern` is either one bool
// per layer or a period n (layers i with i % n < n - 1 are local, as in llama.cpp).
void read_sliding_pattern(const gguf::GgufFile& file, ModelConfig& c, uint64_t default_period) {
  const std::string key = c.architecture + ".attention.sliding_window_pattern";
  if (const gguf::Value* v = file.find(key); v != nullptr && v->as_array() != nullptr) {
    const gguf::Array& flags = *v->as_array();
    if (int64_t(flags.items.size()) != c.n_layer) {
      fail("{}: {} has {} entries for {} layers", file.name(), key, flags.items.size(), c.n_layer);
    }
    for (size_t i = 0; i < flags.items.size(); ++i) {
      const auto flag = flags.items[i].as_bool();
      if (!flag) fail("{}: {} must hold bools", file.name(), key);
      c.layer_sliding[i] = *flag;
    }
    return;
  }
  const uint64_t period = file.get_uint(key).value_or(default_period);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    c.layer_sliding[size_t(i)] = period == 0 || uint64_t(i) % period < period - 1;
  }
}

// A per-layer bool array `key`, if the file has one (e.g. `<arch>.attention.rope_pattern`).
bool read_layer_flags(const gguf::GgufFile& file, const std::string& key, int64_t n_layer, std::vector<bool>& out) {
  const gguf::Value* v = file.find(key);
  if (v == nullptr) return false;
  const gguf::Array* flags = v->as_array();
  if (flags == nullptr || int64_t(flags->items.size()) != n_layer) {
    fail("{}: {} must be an array of {} bools (one per layer)", file.name(), key, n_layer);
  }
  out.assign(size_t(n_layer), false);
  for (size_t i = 0; i < flags->items.size(); ++i) {
    const auto flag = flags->items[i].as_bool();
    if (!flag) fail("{}: {} must hold bools", file.name(), key);
    out[i] = *flag;
  }
  return true;
}

float optional_float(const gguf::GgufFile& file, const std::string& key, float fallback) {
  return float(file.get_float(key).value_or(fallback));
}

// Architectures whose attention and MLP follow Llama's layout except for the listed features.
bool apply_dense_variant(const gguf::GgufFile& file, ModelConfig& c) {
  const std::string& a = c.architecture;
  if (a == "gemma2") {
    // Gemma norms store 1 + w (llama.cpp's converter adds the 1); post-norms; GeLU-tanh; attention
    // logits soft-capped; every other layer (the even ones) local.
    c.post_norms = true;
    c.rope_neox = true;
    c.activation = Activation::GeluTanh;
    c.embedding_scale = std::sqrt(float(c.n_embd));
    c.attn_logit_softcap = optional_float(file, a + ".attn_logit_softcapping", 0.0f);
    // query_pre_attn_scalar is not in the file: the head size, except Gemma 2 27B (46 layers), as
    // llama.cpp reads it.
    c.attention_scale = 1.0f / std::sqrt(float(c.n_layer == 46 ? c.n_embd / c.n_head : c.head_dim));
    if (c.sliding_window > 0) read_sliding_pattern(file, c, 2);
    return true;
  }
  if (a == "phi3") {
    // Fused attn_qkv and gate+up (ffn_up of 2 * n_ff rows) tensors: split into views at load.
    c.rope_neox = true;
    return true;
  }
  if (a == "granite") {
    c.embedding_scale = optional_float(file, a + ".embedding_scale", 1.0f);
    c.residual_scale = optional_float(file, a + ".residual_scale", 1.0f);
    c.attention_scale = optional_float(file, a + ".attention.scale", 0.0f);
    const float logit_divisor = optional_float(file, a + ".logit_scale", 1.0f);
    if (!(logit_divisor > 0.0f)) fail("{}: {}.logit_scale {} must be positive", file.name(), a, logit_divisor);
    c.logit_scale = 1.0f / logit_divisor;
    return true;
  }
  if (a == "olmo2") {
    c.rope_neox = true;
    c.input_norms = false;
    c.post_norms = true;
    c.qk_norm = QkNorm::Full;
    if (c.sliding_window > 0) read_sliding_pattern(file, c, 4);
    return true;
  }
  if (a == "olmoe") {
    // OLMoE: Llama's block with q/k RMSNorms over the whole projection and a MoE MLP (moe_config.h).
    c.rope_neox = true;
    c.qk_norm = QkNorm::Full;
    return true;
  }
  if (a == "smollm3") {
    // Every fourth layer has no RoPE (NoPE), unless the file lists the layers.
    if (!read_layer_flags(file, a + ".attention.rope_pattern", c.n_layer, c.layer_rope)) {
      c.layer_rope.assign(size_t(c.n_layer), true);
      for (int64_t il = 0; il < c.n_layer; ++il) c.layer_rope[size_t(il)] = (il + 1) % 4 != 0;
    }
    return true;
  }
  if (a == "command-r") {
    // Cohere: one LayerNorm (no bias) feeds attention and MLP in parallel; interleaved RoPE.
    c.norm = NormKind::Layer;
    c.parallel_block = true;
    c.logit_scale = optional_float(file, a + ".logit_scale", 1.0f);
    if (file.find_tensor("blk.0.attn_q_norm.weight") != nullptr) c.qk_norm = QkNorm::PerHeadEach;
    return true;
  }
  if (a == "stablelm") {
    // LayerNorm with bias, partial NeoX RoPE; StableLM 2 12B: per-head q/k LayerNorms and a
    // parallel block (no ffn_norm).
    c.norm = NormKind::Layer;
    c.rope_neox = true;
    if (file.find_tensor("blk.0.attn_q_norm.weight") != nullptr) c.qk_norm = QkNorm::PerHeadEach;
    c.parallel_block = file.find_tensor("blk.0.ffn_norm.weight") == nullptr;
    return true;
  }
  if (a == "starcoder2") {
    // LayerNorm with bias, biases on every linear layer, a plain GELU MLP (no gate).
    c.norm = NormKind::Layer;
    c.rope_neox = true;
    c.gated_ffn = false;
    c.activation = Activation::GeluTanh;
    if (c.sliding_window > 0) read_sliding_pattern(file, c, 0);
    return true;
  }
  return false;
}

// DeepSeek-V2's latent attention as llama.cpp's converter writes it: key_length is the latent key
// (kv_lora_rank + rope), value_length kv_lora_rank, key_length_mla / value_length_mla the
// decompressed heads, head_count_kv 1.
void read_mla(const gguf::GgufFile& file, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  MlaConfig& m = c.mla;
  m.kv_lora_rank = require_positive(file, p + "attention.kv_lora_rank");
  // Files converted before llama.cpp's absorbed form have attn_kv_b and no *_mla keys.
  if (!file.get_uint(p + "attention.key_length_mla") && file.find_tensor("blk.0.attn_kv_b.weight") != nullptr) {
    fail("{}: this DeepSeek-V2 GGUF has the old layout (attn_kv_b, no {}attention.key_length_mla) from before "
         "llama.cpp split attn_kv_b into attn_k_b and attn_v_b; convert the model again with a current "
         "convert_hf_to_gguf.py", file.name(), p);
  }
  // Queries through a latent when the file has attn_q_a (llama.cpp decides by layer count: its
  // Lite models, 26/27 layers, have attn_q).
  m.q_lora_rank = int64_t(file.get_uint(p + "attention.q_lora_rank").value_or(0));
  if (file.find_tensor("blk.0.attn_q_a.weight") == nullptr) m.q_lora_rank = 0;
  if (file.get_float(p + "attention.temperature_scale")) {
    fail("{}: {}attention.temperature_scale (attention temperature tuning, as Mistral Large 3 converts) is not "
         "supported yet", file.name(), p);
  }
  m.rope_dim = c.n_rot;
  const int64_t k_mla = require_positive(file, p + "attention.key_length_mla");
  m.v_dim = require_positive(file, p + "attention.value_length_mla");
  m.nope_dim = k_mla - m.rope_dim;
  if (m.nope_dim <= 0) {
    fail("{}: {}attention.key_length_mla {} must exceed rope.dimension_count {}", file.name(), p, k_mla, m.rope_dim);
  }
  if (c.head_dim != m.kv_lora_rank + m.rope_dim) {
    fail("{}: {}attention.key_length {} must be kv_lora_rank {} + rope.dimension_count {} (the latent key)",
         file.name(), p, c.head_dim, m.kv_lora_rank, m.rope_dim);
  }
  if (auto v = file.get_uint(p + "attention.value_length"); v && int64_t(*v) != m.kv_lora_rank) {
    fail("{}: {}attention.value_length {} must be kv_lora_rank {} (the latent value)", file.name(), p, *v,
         m.kv_lora_rank);
  }
  if (c.n_head_kv != 1) {
    fail("{}: {}attention.head_count_kv is {}; latent attention has one shared latent head (1)", file.name(), p,
         c.n_head_kv);
  }
  // Under YaRN DeepSeek also scales the logits (llama.cpp's kq_scale; DeepSeek's softmax_scale
  // times mscale(factor, mscale_all_dim)^2).
  c.attention_scale = c.rope_yarn_kq_scale / std::sqrt(float(k_mla));
}

// Each supported architecture: what differs from Llama. The forward pass is shared.
void apply_architecture(const gguf::GgufFile& file, ModelConfig& c) {
  const std::string& a = c.architecture;
  if (apply_dense_variant(file, c)) return;
  if (a == "llama" || a == "mistral" || a == "internlm2") {
    // Mistral: an optional sliding window, on every layer unless a pattern says otherwise.
    // InternLM2: Llama's math; llama.cpp's converter splits its fused wqkv into q, k, v.
    if (c.sliding_window > 0) read_sliding_pattern(file, c, 0);
    return;
  }
  if (a == "qwen2" || a == "qwen2moe") {
    c.qkv_bias = true;
    c.rope_neox = true;
    return;
  }
  if (a == "qwen3" || a == "qwen3moe") {
    c.qk_norm = QkNorm::PerHead;
    c.rope_neox = true;
    return;
  }
  if (a == "deepseek2") {
    // DeepSeek-V2 / V2-Lite: latent attention (read_mla), interleaved RoPE on the rotary part only,
    // leading dense layers then MoE layers with ungated shared experts (moe_config.h).
    read_mla(file, c);
    return;
  }
  if (a == "gemma3") {
    c.qk_norm = QkNorm::PerHead;
    c.post_norms = true;
    c.rope_neox = true;
    c.activation = Activation::GeluTanh;
    c.embedding_scale = std::sqrt(float(c.n_embd));
    // Gemma 3 scales queries by query_pre_attn_scalar^-1/2: the head size, except for the 27B
    // model (62 layers), where it is hidden / heads.
    c.attention_scale = 1.0f / std::sqrt(float(c.n_layer == 62 ? c.n_embd / c.n_head : c.head_dim));
    // By default five local (sliding-window) layers, then one global layer; local layers use their
    // own RoPE base (10000 unless rope.freq_base_swa says otherwise).
    if (c.sliding_window > 0) read_sliding_pattern(file, c, 6);
    c.rope_freq_base_sliding = float(file.get_float(a + ".rope.freq_base_swa").value_or(10000.0));
    if (auto scale = file.get_float(a + ".attention.scale")) c.attention_scale = float(*scale);
    return;
  }
  fail("{}: unknown architecture '{}' (supported: {})", file.name(), a,
       fmt::join(supported_architectures(), ", "));
}

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> kNames = {
      "llama", "mistral", "qwen2",   "qwen3",     "gemma3",   "gemma2",     "phi3",     "granite",
      "olmo2", "smollm3", "command-r", "stablelm", "starcoder2", "internlm2", "qwen2moe", "qwen3moe", "olmoe",
      "deepseek2"};
  return kNames;
}

ModelConfig read_model_config(const gguf::GgufFile& file) {
  ModelConfig c;
  c.architecture = file.require_string("general.architecture");
  c.name = file.get_string("general.name").value_or("");
  bool known = false;
  for (const auto& name : supported_architectures()) known = known || name == c.architecture;
  if (!known) {
    fail("{}: unknown architecture '{}' (supported: {})", file.name(), c.architecture,
         fmt::join(supported_architectures(), ", "));
  }
  read_common(file, c);
  apply_architecture(file, c);
  c.moe = read_moe_config(file, c.architecture, c.n_ff);
  if (auto softcap = file.get_float(c.architecture + ".final_logit_softcapping")) {
    c.final_logit_softcap = float(*softcap);
  }
  c.n_vocab = 0;  // set from the embedding tensor by the weight loader
  return c;
}

}  // namespace kestrel
