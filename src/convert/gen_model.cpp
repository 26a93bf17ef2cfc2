#include "convert/gen_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "convert/gen_random.h"
#include "convert/gen_vocab.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "loader/gguf_writer.h"
#include "quant/format.h"

namespace kestrel {
namespace {

constexpr float kWeightStd = 0.02f;
constexpr int64_t kBlockElements = int64_t(1) << 16;  // RNG block: one generator per ~64K values

// Llama 3.1/3.2: factor 8/32, low 1, high 4, original context 8192.
constexpr Llama3RopeScaling kLlama31Scaling{8.0f, 1.0f, 4.0f, 8192};
constexpr Llama3RopeScaling kLlama32Scaling{32.0f, 1.0f, 4.0f, 8192};

ModelPreset deepseek_preset(ModelPreset p, int64_t kv_lora_rank, int64_t qk_nope, int64_t qk_rope, int64_t v_head,
                            int64_t n_dense_lead, int64_t n_shared_experts, float yarn_factor, int64_t yarn_orig_ctx,
                            float yarn_mscale) {
  p.kv_lora_rank = kv_lora_rank;
  p.qk_nope = qk_nope;
  p.qk_rope = qk_rope;
  p.v_head = v_head;
  p.n_dense_lead = n_dense_lead;
  p.n_shared_experts = n_shared_experts;
  p.yarn_factor = yarn_factor;
  p.yarn_orig_ctx = yarn_orig_ctx;
  p.yarn_mscale = yarn_mscale;
  return p;
}

const std::vector<ModelPreset> kPresets = {
    // name, description, vocab, n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx,
    // rope base, rms eps, tied, rope scaling
    {"tiny", "tiny Llama 2 shape (tests)", PresetVocab::LlamaSpm, 32000, 256, 2, 8, 4, 768, 2048,
     10000.0f, 1e-5f, false, {}},
    {"tiny-llama3", "tiny Llama 3 shape (tests)", PresetVocab::Llama3, 128256, 128, 2, 4, 2, 384,
     8192, 500000.0f, 1e-5f, true, kLlama32Scaling},
    {"llama-3.2-1b", "Llama 3.2 1B", PresetVocab::Llama3, 128256, 2048, 16, 32, 8, 8192, 131072,
     500000.0f, 1e-5f, true, kLlama32Scaling},
    {"llama-3.2-3b", "Llama 3.2 3B", PresetVocab::Llama3, 128256, 3072, 28, 24, 8, 8192, 131072,
     500000.0f, 1e-5f, true, kLlama32Scaling},
    {"llama-3.1-8b", "Llama 3.1 8B", PresetVocab::Llama3, 128256, 4096, 32, 32, 8, 14336, 131072,
     500000.0f, 1e-5f, false, kLlama31Scaling},
    {"tinyllama-1.1b", "TinyLlama 1.1B", PresetVocab::LlamaSpm, 32000, 2048, 22, 32, 4, 5632, 2048,
     10000.0f, 1e-5f, false, {}},
    {"llama-2-7b", "Llama 2 7B", PresetVocab::LlamaSpm, 32000, 4096, 32, 32, 32, 11008, 4096,
     10000.0f, 1e-5f, false, {}},
    // Mixture of Experts (last three: experts, experts per token, expert FFN size).
    {"tiny-moe", "tiny MoE shape (tests)", PresetVocab::Gpt2, 50257, 64, 2, 4, 2, 128, 2048,
     10000.0f, 1e-6f, false, {}, 8, 2, 128},
    // OLMoE 1B-7B's shape (its vocabulary is GPT-NeoX's 50,304; GPT-2's 50,257 is the nearest one
    // at hand) in the Qwen3-MoE layout.
    {"olmoe-1b-7b", "OLMoE 1B-7B (64 experts, 8 used)", PresetVocab::Gpt2, 50257, 2048, 16, 16, 16, 1024,
     4096, 10000.0f, 1e-5f, false, {}, 64, 8, 1024},
    // DeepSeek-V2 latent attention (kv_lora_rank, nope, rope, value heads, dense leading layers,
    // shared experts, YaRN factor / original context / mscale_all_dim).
    deepseek_preset({"tiny-mla", "tiny DeepSeek-V2 shape (tests)", PresetVocab::Gpt2, 50257, 64, 2, 4, 4, 96, 2048,
                     10000.0f, 1e-6f, false, {}, 4, 2, 32},
                    32, 16, 16, 16, 1, 2, 0.0f, 0, 0.0f),
    // DeepSeek-V2-Lite's shape (its vocabulary is 102,400 tokens; GPT-2's 50,257 is the one at hand).
    deepseek_preset({"deepseek-v2-lite", "DeepSeek-V2-Lite (MLA, 64 experts, 6 used, 2 shared)", PresetVocab::Gpt2,
                     50257, 2048, 27, 16, 16, 10944, 163840, 10000.0f, 1e-6f, false, {}, 64, 6, 1408},
                    512, 128, 64, 128, 1, 2, 40.0f, 4096, 0.707f),
};

struct TensorPlan {
  std::string name;
  std::vector<int64_t> dims;  // innermost first
  enum class Fill { Normal, Ones, Values } fill = Fill::Normal;
  std::vector<float> values;  // Fill::Values
};

TensorPlan normal_matrix(std::string name, int64_t row_length, int64_t rows) {
  return {std::move(name), {row_length, rows}, TensorPlan::Fill::Normal, {}};
}

TensorPlan ones(std::string name, int64_t length) {
  return {std::move(name), {length}, TensorPlan::Fill::Ones, {}};
}

std::vector<TensorPlan> plan_tensors(const ModelPreset& p) {
  const int64_t q = p.n_head * p.head_dim();
  const int64_t kv = p.n_head_kv * p.head_dim();
  std::vector<TensorPlan> plan;
  plan.push_back(normal_matrix("token_embd.weight", p.n_embd, p.n_vocab));
  if (p.rope_scaling.factor > 0.0f) {
    std::vector<float> factors = llama3_rope_freq_factors(p);
    const int64_t n = int64_t(factors.size());
    plan.push_back({"rope_freqs.weight", {n}, TensorPlan::Fill::Values, std::move(factors)});
  }
  for (int64_t i = 0; i < p.n_layer; ++i) {
    const std::string b = fmt::format("blk.{}.", i);
    plan.push_back(ones(b + "attn_norm.weight", p.n_embd));
    if (p.is_mla()) {
      // llama.cpp's deepseek2: per-head stacks attn_k_b [nope, r, heads] and attn_v_b [r, v, heads].
      const int64_t r = p.kv_lora_rank;
      plan.push_back(normal_matrix(b + "attn_q.weight", p.n_embd, p.n_head * (p.qk_nope + p.qk_rope)));
      plan.push_back(normal_matrix(b + "attn_kv_a_mqa.weight", p.n_embd, r + p.qk_rope));
      plan.push_back(ones(b + "attn_kv_a_norm.weight", r));
      plan.push_back({b + "attn_k_b.weight", {p.qk_nope, r, p.n_head}, TensorPlan::Fill::Normal, {}});
      plan.push_back({b + "attn_v_b.weight", {r, p.v_head, p.n_head}, TensorPlan::Fill::Normal, {}});
      plan.push_back(normal_matrix(b + "attn_output.weight", p.n_head * p.v_head, p.n_embd));
    } else {
      plan.push_back(normal_matrix(b + "attn_q.weight", p.n_embd, q));
      plan.push_back(normal_matrix(b + "attn_k.weight", p.n_embd, kv));
      plan.push_back(normal_matrix(b + "attn_v.weight", p.n_embd, kv));
      plan.push_back(normal_matrix(b + "attn_output.weight", q, p.n_embd));
    }
    plan.push_back(ones(b + "ffn_norm.weight", p.n_embd));
    if (p.is_mla() && !p.is_dense_layer(i)) {
      // DeepSeek's MoE: the router, the expert stacks and one ungated shared MLP of
      // n_shared_experts experts' width.
      const int64_t shared = p.n_shared_experts * p.n_ff_expert;
      plan.push_back(normal_matrix(b + "ffn_gate_inp.weight", p.n_embd, p.n_expert));
      for (const char* name : {"ffn_gate_exps.weight", "ffn_up_exps.weight"}) {
        plan.push_back({b + name, {p.n_embd, p.n_ff_expert, p.n_expert}, TensorPlan::Fill::Normal, {}});
      }
      plan.push_back({b + "ffn_down_exps.weight", {p.n_ff_expert, p.n_embd, p.n_expert}, TensorPlan::Fill::Normal, {}});
      plan.push_back(normal_matrix(b + "ffn_gate_shexp.weight", p.n_embd, shared));
      plan.push_back(normal_matrix(b + "ffn_up_shexp.weight", p.n_embd, shared));
      plan.push_back(normal_matrix(b + "ffn_down_shexp.weight", shared, p.n_embd));
      continue;
    }
    if (p.is_moe() && !p.is_mla()) {
      // Qwen3-MoE: per-head q/k norms, the router, and each expert stack [n_expert][rows][cols]
      // (GGUF dims innermost first: cols, rows, n_expert).
      plan.push_back(ones(b + "attn_q_norm.weight", p.head_dim()));
      plan.push_back(ones(b + "attn_k_norm.weight", p.head_dim()));
      plan.push_back(normal_matrix(b + "ffn_gate_inp.weight", p.n_embd, p.n_expert));
      for (const char* name : {"ffn_gate_exps.weight", "ffn_up_exps.weight"}) {
        plan.push_back({b + name, {p.n_embd, p.n_ff_expert, p.n_expert}, TensorPlan::Fill::Normal, {}});
      }
      plan.push_back({b + "ffn_down_exps.weight", {p.n_ff_expert, p.n_embd, p.n_expert}, TensorPlan::Fill::Normal, {}});
      continue;
    }
    plan.push_back(normal_matrix(b + "ffn_gate.weight", p.n_embd, p.n_ff));
    plan.push_back(normal_matrix(b + "ffn_up.weight", p.n_embd, p.n_ff));
    plan.push_back(normal_matrix(b + "ffn_down.weight", p.n_ff, p.n_embd));
  }
  plan.push_back(ones("output_norm.weight", p.n_embd));
  if (!p.tied_embeddings) plan.push_back(normal_matrix("output.weight", p.n_embd, p.n_vocab));
  return plan;
}

void set_model_metadata(gguf::GgufWriter& w, const ModelPreset& p, const QuantRecipe& recipe,
                        uint64_t seed) {
  const std::string a = std::string(p.architecture()) + ".";
  w.set_string("general.architecture", std::string(p.architecture()));
  w.set_string("general.name", fmt::format("{} (synthetic random weights)", p.description));
  w.set_u32("general.file_type", recipe.file_type);
  w.set_u32("general.quantization_version", 2);
  w.set_u32(a + "vocab_size", uint32_t(p.n_vocab));
  w.set_u32(a + "context_length", uint32_t(p.n_ctx));
  w.set_u32(a + "embedding_length", uint32_t(p.n_embd));
  w.set_u32(a + "block_count", uint32_t(p.n_layer));
  w.set_u32(a + "feed_forward_length", uint32_t(p.n_ff));
  w.set_u32(a + "attention.head_count", uint32_t(p.n_head));
  if (p.is_mla()) {
    // As llama.cpp's converter writes DeepSeek-V2: one latent KV head (key_length kv_lora_rank +
    // rope, value_length kv_lora_rank), the decompressed head sizes as *_mla.
    w.set_u32(a + "attention.head_count_kv", 1);
    w.set_u32(a + "attention.kv_lora_rank", uint32_t(p.kv_lora_rank));
    w.set_u32(a + "attention.key_length", uint32_t(p.kv_lora_rank + p.qk_rope));
    w.set_u32(a + "attention.value_length", uint32_t(p.kv_lora_rank));
    w.set_u32(a + "attention.key_length_mla", uint32_t(p.qk_nope + p.qk_rope));
    w.set_u32(a + "attention.value_length_mla", uint32_t(p.v_head));
    w.set_u32(a + "rope.dimension_count", uint32_t(p.qk_rope));
    w.set_u32(a + "leading_dense_block_count", uint32_t(p.n_dense_lead));
    w.set_u32(a + "expert_shared_count", uint32_t(p.n_shared_experts));
    w.set_f32(a + "expert_weights_scale", 1.0f);
    if (p.yarn_factor > 0.0f) {
      w.set_string(a + "rope.scaling.type", "yarn");
      w.set_f32(a + "rope.scaling.factor", p.yarn_factor);
      w.set_u32(a + "rope.scaling.original_context_length", uint32_t(p.yarn_orig_ctx));
      w.set_f32(a + "rope.scaling.yarn_log_multiplier", 0.1f * p.yarn_mscale);  // the converter's 0.1 factor
    }
  } else {
    w.set_u32(a + "attention.head_count_kv", uint32_t(p.n_head_kv));
    w.set_u32(a + "attention.key_length", uint32_t(p.head_dim()));
    w.set_u32(a + "attention.value_length", uint32_t(p.head_dim()));
    w.set_u32(a + "rope.dimension_count", uint32_t(p.head_dim()));
  }
  w.set_f32(a + "rope.freq_base", p.rope_freq_base);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", p.rms_eps);
  if (p.is_moe()) {
    w.set_u32(a + "expert_count", uint32_t(p.n_expert));
    w.set_u32(a + "expert_used_count", uint32_t(p.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", uint32_t(p.n_ff_expert));
  }
  // Provenance: nobody should mistake this file for a trained model.
  w.set_string("kestrel.synthetic.preset", std::string(p.name));
  w.set("kestrel.synthetic.seed", gguf::Value::of_u64(seed));
}

// Fills `out` with the tensor encoded as `type`: rows of normal values generated block by block
// (each block's generator depends only on seed, tensor and block), encoded row by row.
void fill_normal_tensor(ThreadPool& pool, const quant::WeightFormat& format, int64_t row_length,
                        int64_t rows, uint64_t seed, uint64_t tensor_index, std::span<uint8_t> out) {
  const int64_t rows_per_block = std::max<int64_t>(1, kBlockElements / row_length);
  const int64_t num_blocks = (rows + rows_per_block - 1) / rows_per_block;
  const int64_t out_row = quant::row_bytes(format, row_length);
  const bool direct_f32 = format.type == DType::F32;
  pool.parallel_for(num_blocks, [&](int64_t begin, int64_t end) {
    std::vector<float> values(direct_f32 ? 0 : size_t(rows_per_block * row_length));
    for (int64_t block = begin; block < end; ++block) {
      const int64_t first = block * rows_per_block;
      const int64_t count = std::min(rows_per_block, rows - first);
      float* dst =
          direct_f32 ? reinterpret_cast<float*>(out.data() + first * out_row) : values.data();
      Xoshiro256(seed, tensor_index, uint64_t(block))
          .fill_normal(dst, count * row_length, kWeightStd);
      if (direct_f32) continue;
      for (int64_t r = 0; r < count; ++r) {
        format.quantize_row(values.data() + r * row_length, out.data() + (first + r) * out_row,
                            row_length);
      }
    }
  });
}

}  // namespace

int64_t ModelPreset::parameter_count() const {
  const int64_t rope = rope_scaling.factor > 0.0f ? head_dim() / 2 : 0;
  const int64_t outside = n_vocab * n_embd * (tied_embeddings ? 1 : 2) + n_embd + rope;
  if (is_mla()) {
    const int64_t r = kv_lora_rank;
    const int64_t attention = n_embd * n_head * (qk_nope + qk_rope) + n_embd * (r + qk_rope) + r +
                              n_head * r * (qk_nope + v_head) + n_head * v_head * n_embd;
    const int64_t moe = n_expert * 3 * n_embd * n_ff_expert + n_embd * n_expert +
                        3 * n_embd * n_shared_experts * n_ff_expert;
    const int64_t layers = n_layer * (2 * n_embd + attention) + n_dense_lead * 3 * n_embd * n_ff +
                           (n_layer - n_dense_lead) * moe;
    return outside + layers;
  }
  const int64_t q = n_head * head_dim();
  const int64_t kv = n_head_kv * head_dim();
  const int64_t ffn = is_moe() ? n_expert * 3 * n_embd * n_ff_expert + n_embd * n_expert + 2 * head_dim()
                               : 3 * n_embd * n_ff;
  const int64_t per_layer = 2 * n_embd + n_embd * (q + 2 * kv) + q * n_embd + ffn;
  return outside + n_layer * per_layer;
}

int64_t ModelPreset::active_parameter_count() const {
  const int64_t moe_layers = n_layer - (is_mla() ? n_dense_lead : 0);
  const int64_t unused_experts = is_moe() ? moe_layers * (n_expert - n_expert_used) * 3 * n_embd * n_ff_expert : 0;
  const int64_t embedding_rows = tied_embeddings ? 0 : (n_vocab - 1) * n_embd;
  return parameter_count() - unused_experts - embedding_rows;
}

const std::vector<ModelPreset>& model_presets() { return kPresets; }

const ModelPreset* find_model_preset(std::string_view name) {
  for (const ModelPreset& p : kPresets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::vector<float> llama3_rope_freq_factors(const ModelPreset& p) {
  // Meta's rope scaling: wavelengths shorter than original_context / high_freq_factor keep their
  // frequency, those longer than original_context / low_freq_factor are slowed by `factor`, and
  // the band between is interpolated. llama.cpp divides each frequency by the stored factor.
  const Llama3RopeScaling& s = p.rope_scaling;
  const int64_t dim = p.head_dim();
  const double low_freq_wavelength = double(s.original_context) / s.low_freq_factor;
  const double high_freq_wavelength = double(s.original_context) / s.high_freq_factor;
  std::vector<float> factors;
  for (int64_t i = 0; i < dim; i += 2) {
    const double freq = 1.0 / std::pow(double(p.rope_freq_base), double(i) / double(dim));
    const double wavelength = 2.0 * std::numbers::pi / freq;
    if (wavelength < high_freq_wavelength) {
      factors.push_back(1.0f);
    } else if (wavelength > low_freq_wavelength) {
      factors.push_back(s.factor);
    } else {
      const double smooth = (double(s.original_context) / wavelength - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      factors.push_back(float(1.0 / ((1.0 - smooth) / s.factor + smooth)));
    }
  }
  return factors;
}

GenModelStats generate_model(const GenModelOptions& o,
                             const std::function<void(int64_t, int64_t)>& on_progress) {
  const ModelPreset* preset = find_model_preset(o.preset);
  if (preset == nullptr) {
    std::string names;
    for (const ModelPreset& p : kPresets) {
      names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
    }
    fail("unknown preset '{}' (choose one of: {})", o.preset, names);
  }
  const ModelPreset& p = *preset;
  std::optional<QuantRecipe> recipe = find_quant_recipe(o.type);
  if (!recipe) fail("unknown type '{}' (choose one of: {})", o.type, quant_recipe_names());
  if (o.pure) recipe->mix = QuantMix::Pure;
  gguf::GgufWriter writer;
  set_model_metadata(writer, p, *recipe, o.seed);
  const std::string& vocab_file = p.vocab == PresetVocab::Llama3   ? o.llama3_tiktoken
                                  : p.vocab == PresetVocab::Gpt2 ? o.gpt2_vocab_gguf
                                                                 : o.spm_vocab_gguf;
  const int64_t vocab_size = p.vocab == PresetVocab::Llama3 ? set_llama3_vocab(writer, vocab_file)
                                                            : copy_gguf_vocab(writer, vocab_file);
  if (vocab_size != p.n_vocab) {
    fail("preset {} needs a vocabulary of {} tokens but {} has {}", p.name, p.n_vocab, vocab_file, vocab_size);
  }

  ThreadPool pool(std::max(1, o.num_threads));
  GenModelStats stats;
  const std::vector<TensorPlan> plan = plan_tensors(p);
  // The types `kestrel quantize` would give these tensors if they were F32 (norms and rope
  // factors stay F32).
  std::vector<QuantTensorInfo> infos;
  for (const TensorPlan& t : plan) infos.push_back({t.name, t.dims, DType::F32});
  const std::vector<QuantChoice> choices = plan_quantization(*recipe, infos,
                                                               {std::string(p.architecture()), p.n_layer, p.n_head,
                                                                p.n_head_kv, p.n_expert});
  for (size_t index = 0; index < plan.size(); ++index) {
    const TensorPlan& t = plan[index];
    const DType type = choices[index].type;
    const quant::WeightFormat& format = quant::require_format(type);
    int64_t elements = 1;
    for (int64_t d : t.dims) elements *= d;
    stats.parameters += elements;
    stats.tensor_bytes += uint64_t(dtype_row_bytes(type, t.dims[0]) * (elements / t.dims[0]));
    ++stats.tensors;
    const uint64_t seed = o.seed;
    const int64_t total = int64_t(plan.size());
    // Runs inside writer.write(), below, while everything captured is still alive.
    writer.add_tensor_fill(t.name, type, t.dims, [&t, &format, &pool, seed, index, total,
                                                  &on_progress](std::span<uint8_t> out) {
      const int64_t row_length = t.dims[0];
      const int64_t rows = int64_t(out.size()) / quant::row_bytes(format, row_length);
      if (t.fill == TensorPlan::Fill::Normal) {
        fill_normal_tensor(pool, format, row_length, rows, seed, index, out);
      } else {  // a 1-D tensor: one row
        const std::vector<float> values = t.fill == TensorPlan::Fill::Ones
                                              ? std::vector<float>(size_t(row_length), 1.0f)
                                              : t.values;
        format.quantize_row(values.data(), out.data(), row_length);
      }
      if (on_progress) on_progress(int64_t(index) + 1, total);
    });
  }
  writer.write(o.output);
  return stats;
}

}  // namespace kestrel
