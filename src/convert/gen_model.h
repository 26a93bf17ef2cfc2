// Synthetic models ("dummy weights", as vLLM calls them): a GGUF with the exact shape, metadata
// and vocabulary of a real model and random weights, so speed can be measured with no download.
// Matrices are normal with std 0.02, norm weights 1.0; Llama 3 shapes also carry the rope_freqs
// tensor that Llama 3's rope scaling gives (as llama.cpp's converter writes it), so attention
// costs what it costs in the real model. Tensors are generated and encoded one at a time while the
// file is written (threads, a fast RNG), so memory stays near one tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "convert/quant_recipe.h"
#include "core/dtype.h"

namespace kestrel {

enum class PresetVocab {
  Llama3,       // Meta's Llama 3 tiktoken vocabulary (128,256 tokens)
  LlamaSpm,     // Llama 2's SentencePiece vocabulary (32,000 tokens)
  Gpt2,         // GPT-2's byte-level BPE vocabulary (50,257 tokens; llama.cpp's ggml-vocab-gpt-2.gguf)
};

// Llama 3.1/3.2 rope scaling (rope_type "llama3"); factor 0 means none.
struct Llama3RopeScaling {
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_context = 8192;
};

struct ModelPreset {
  std::string_view name;         // e.g. "llama-3.2-1b"
  std::string_view description;  // e.g. "Llama 3.2 1B"
  PresetVocab vocab;
  int64_t n_vocab;               // must equal the vocabulary's size
  int64_t n_embd;
  int64_t n_layer;
  int64_t n_head;
  int64_t n_head_kv;
  int64_t n_ff;
  int64_t n_ctx;
  float rope_freq_base;
  float rms_eps;
  bool tied_embeddings;          // no output.weight: the output projection reuses token_embd
  Llama3RopeScaling rope_scaling;
  // Mixture of Experts (0 experts: dense). MoE presets are written as llama.cpp's Qwen3-MoE
  // layout (architecture "qwen3moe": per-head q/k norms, router ffn_gate_inp, expert stacks
  // ffn_{gate,up,down}_exps), which both llama.cpp and Kestrel run.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_expert = 0;
  // DeepSeek-V2 (kv_lora_rank > 0): latent attention in llama.cpp's deepseek2 layout (attn_q,
  // attn_kv_a_mqa, attn_kv_a_norm, attn_k_b, attn_v_b; model_config.h's MlaConfig), the first
  // n_dense_lead layers dense (n_ff), the others MoE with n_shared_experts ungated shared experts,
  // and YaRN (yarn_factor over yarn_orig_ctx positions, mscale_all_dim yarn_mscale) when
  // yarn_factor > 0.
  int64_t kv_lora_rank = 0;
  int64_t qk_nope = 0;
  int64_t qk_rope = 0;
  int64_t v_head = 0;
  int64_t n_dense_lead = 0;
  int64_t n_shared_experts = 0;
  float yarn_factor = 0.0f;
  int64_t yarn_orig_ctx = 0;
  float yarn_mscale = 0.0f;

  bool is_moe() const { return n_expert > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  std::string_view architecture() const { return is_mla() ? "deepseek2" : is_moe() ? "qwen3moe" : "llama"; }
  int64_t head_dim() const { return n_embd / n_head; }
  bool is_dense_layer(int64_t layer) const { return !is_moe() || layer < n_dense_lead; }
  int64_t parameter_count() const;
  // Parameters one token's forward pass reads: all but the experts it does not use and the
  // embedding table (one row of it).
  int64_t active_parameter_count() const;
};

const std::vector<ModelPreset>& model_presets();
// nullptr when there is no such preset.
const ModelPreset* find_model_preset(std::string_view name);

// Llama 3's rope frequency divisors (llama.cpp's rope_freqs.weight): [head_dim / 2].
std::vector<float> llama3_rope_freq_factors(const ModelPreset& preset);

struct GenModelOptions {
  std::string preset;
  std::string type = "F16";      // a `kestrel quantize` type or mixture (F16, Q8_0, Q4_K_M, ...):
                                 // each tensor gets the type that quantize would give it
  bool pure = false;             // as quantize --pure: the type's base for every matrix
  std::string output;
  uint64_t seed = 0;
  int num_threads = 2;
  std::string llama3_tiktoken;   // Meta's tokenizer.model, for Llama 3 presets
  std::string spm_vocab_gguf;    // a GGUF with Llama 2's vocabulary, for Llama 2 presets
  std::string gpt2_vocab_gguf;   // a GGUF with GPT-2's vocabulary, for GPT-2-vocabulary presets
};

struct GenModelStats {
  int64_t parameters = 0;
  int64_t tensors = 0;
  uint64_t tensor_bytes = 0;
};

// Writes the model (PATH.tmp, then renamed). on_progress(tensors written, tensors in all) is
// called after each tensor.
GenModelStats generate_model(const GenModelOptions& options,
                             const std::function<void(int64_t, int64_t)>& on_progress = {});

}  // namespace kestrel
