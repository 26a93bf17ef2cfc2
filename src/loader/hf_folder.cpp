#include "loader/hf_folder.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "loader/hf_quantized.h"
#include "loader/safetensors.h"

namespace kestrel {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot read", path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

struct Architecture {
  const char* hf_name;
  const char* gguf_name;
  bool permute_qk;  // GGUF "llama" keeps interleaved RoPE: HF's half-split rows are permuted
};

constexpr Architecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", true},    {"MistralForCausalLM", "llama", true},
    {"Qwen2ForCausalLM", "qwen2", false},   {"Qwen3ForCausalLM", "qwen3", false},
    {"Gemma3ForCausalLM", "gemma3", false}, {"Gemma3ForConditionalGeneration", "gemma3", false},
};

class Config {
 public:
  Config(json j, std::string path) : j_(std::move(j)), path_(std::move(path)) {}
  const json& raw() const { return j_; }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  int64_t integer(const char* key) const {
    if (!has(key)) fail("{}: missing config key '{}'", path_, key);
    if (!j_[key].is_number_integer() || j_[key].get<int64_t>() <= 0) {
      fail("{}: config key '{}' must be a positive integer", path_, key);
    }
    return j_[key].get<int64_t>();
  }
  int64_t integer_or(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const char* key) const {
    if (!has(key)) fail("{}: missing config key '{}'", path_, key);
    if (!j_[key].is_number()) fail("{}: config key '{}' must be a number", path_, key);
    return j_[key].get<double>();
  }
  double number_or(const char* key, double fallback) const { return has(key) ? number(key) : fallback; }

 private:
  json j_;
  std::string path_;
};

class Metadata {
 public:
  void set(std::string key, gguf::Value value) { kv_.push_back({std::move(key), std::move(value)}); }
  void u32(std::string key, int64_t v) { set(std::move(key), gguf::Value::of_u32(uint32_t(v))); }
  void f32(std::string key, double v) { set(std::move(key), gguf::Value::of_f32(float(v))); }
  void str(std::string key, std::string v) { set(std::move(key), gguf::Value::of_string(std::move(v))); }
  std::vector<gguf::KeyValue>& items() { return kv_; }

 private:
  std::vector<gguf::KeyValue> kv_;
};

// Llama 3 "rope_scaling": each frequency's wavelength decides whether it is kept, divided by
// `factor`, or smoothly in between; GGUF stores the divisors as rope_freqs.weight.
std::vector<float> llama3_rope_divisors(const json& scaling, double base, int64_t n_rot, const std::string& path) {
  const double factor = scaling.value("factor", 8.0);
  const double low = scaling.value("low_freq_factor", 1.0);
  const double high = scaling.value("high_freq_factor", 4.0);
  const double original = scaling.value("original_max_position_embeddings", 8192.0);
  if (!(factor > 0 && low > 0 && high > low && original > 0)) fail("{}: invalid llama3 rope_scaling", path);
  const double low_wavelen = original / low;
  const double high_wavelen = original / high;
  std::vector<float> divisors;
  for (int64_t i = 0; i < n_rot; i += 2) {
    const double freq = 1.0 / std::pow(base, double(i) / double(n_rot));
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) {
      divisors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      divisors.push_back(float(factor));
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      divisors.push_back(float(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return divisors;
}

// GGUF's Q/K row order for `heads` heads of head_dim rows: row 2i + half of a head is HF's row
// i + half * head_dim / 2 (HF pairs RoPE dimensions as (first half, second half), GGUF interleaves).
std::vector<int64_t> qk_row_order(int64_t heads, int64_t head_dim) {
  std::vector<int64_t> order(size_t(heads * head_dim));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      for (int half = 0; half < 2; ++half) {
        order[size_t(h * head_dim + 2 * i + half)] = h * head_dim + i + half * (head_dim / 2);
      }
    }
  }
  return order;
}

// A tensor in GGUF conventions: dims innermost first; data either in place or owned.
struct Built {
  gguf::TensorInfo info;
  std::shared_ptr<std::vector<uint8_t>> owned;
};

class TensorBuilder {
 public:
  TensorBuilder(const safetensors::SafetensorsModel& st, std::string folder, std::string prefix,
                HfQuantization quantization = {})
      : st_(st), folder_(std::move(folder)), prefix_(std::move(prefix)), quantization_(std::move(quantization)) {}

  // A linear layer's weight [rows][cols] (module path without ".weight"): pre-quantized tensors
  // mapped to a Kestrel format (hf_quantized.h), else the float tensor in place. qk_heads > 0:
  // Llama's Q/K rows permuted to GGUF's RoPE pairing (permuted_qk). Appends the weight and, for
  // act-order checkpoints, its input order; a weight stored as F32 because no format holds it
  // exactly is named in `fallbacks`.
  void linear(const std::string& hf_module, const std::string& gguf_name, int64_t rows, int64_t cols,
              std::vector<Built>& out, std::vector<std::string>& fallbacks, int64_t qk_heads = 0,
              int64_t head_dim = 0) const {
    const std::vector<int64_t> row_order = qk_heads > 0 ? qk_row_order(qk_heads, head_dim) : std::vector<int64_t>();
    std::optional<QuantizedLinear> q =
        load_quantized_linear(st_, quantization_, prefix_ + hf_module, gguf_name, rows, cols, row_order, folder_);
    if (!q) {
      const std::string name = hf_module + ".weight";
      out.push_back(qk_heads > 0 ? permuted_qk(name, gguf_name, qk_heads, head_dim, cols)
                                 : in_place(name, gguf_name, {rows, cols}));
      return;
    }
    if (!q->fallback.empty()) fallbacks.push_back(fmt::format("{} ({}) as F32: {}", gguf_name, prefix_ + hf_module, q->fallback));
    out.push_back(Built{std::move(q->weight), std::move(q->owned)});
    if (q->input_order) out.push_back(Built{std::move(*q->input_order), std::move(q->owned_order)});
  }

  const safetensors::Tensor& require(const std::string& hf_name) const {
    const safetensors::Tensor* t = st_.find(prefix_ + hf_name);
    if (t == nullptr) fail("{}: missing tensor '{}'", folder_, prefix_ + hf_name);
    return *t;
  }
  bool has(const std::string& hf_name) const { return st_.find(prefix_ + hf_name) != nullptr; }

  // A 2-D [rows][cols] or 1-D tensor used in place, with its shape checked.
  Built in_place(const std::string& hf_name, const std::string& gguf_name, std::vector<int64_t> shape) const {
    const safetensors::Tensor& t = require(hf_name);
    check_shape(t, shape);
    const auto type = t.float_type();
    if (!type) fail("{}: tensor '{}' has dtype {}; expected F32, F16 or BF16", folder_, t.name, t.dtype);
    Built b;
    b.info.name = gguf_name;
    b.info.type = *type;
    b.info.dims.assign(shape.rbegin(), shape.rend());
    b.info.data = t.data;
    b.info.num_bytes = t.num_bytes;
    // Writers that do not pad the header (the format does not require it) can leave the data
    // misaligned for its element type: such a tensor is copied rather than used in place.
    if (reinterpret_cast<uintptr_t>(t.data) % (*type == DType::F32 ? 4 : 2) != 0) {
      b.owned = std::make_shared<std::vector<uint8_t>>(t.data, t.data + t.num_bytes);
      b.info.data = b.owned->data();
    }
    return b;
  }

  // Converted to F32 (norm weights, optionally + 1).
  Built as_f32(const std::string& hf_name, const std::string& gguf_name, int64_t length, float add) const {
    const safetensors::Tensor& t = require(hf_name);
    check_shape(t, {length});
    std::vector<float> values = floats(t);
    for (float& v : values) v += add;
    return owned_f32(gguf_name, {length}, values);
  }

  // [heads * head_dim][cols] with each head's rows reordered from HF's (first half, second half)
  // RoPE pairing to GGUF's interleaved pairing: row 2i <- i, row 2i+1 <- i + head_dim/2.
  Built permuted_qk(const std::string& hf_name, const std::string& gguf_name, int64_t heads,
                    int64_t head_dim, int64_t cols) const {
    const safetensors::Tensor& t = require(hf_name);
    check_shape(t, {heads * head_dim, cols});
    const auto type = t.float_type();
    if (!type) fail("{}: tensor '{}' has dtype {}; expected F32, F16 or BF16", folder_, t.name, t.dtype);
    const size_t row_bytes = t.num_bytes / size_t(heads * head_dim);
    auto owned = std::make_shared<std::vector<uint8_t>>(t.num_bytes);
    const std::vector<int64_t> order = qk_row_order(heads, head_dim);
    for (size_t dst = 0; dst < order.size(); ++dst) {
      std::memcpy(owned->data() + dst * row_bytes, t.data + size_t(order[dst]) * row_bytes, row_bytes);
    }
    Built b;
    b.info.name = gguf_name;
    b.info.type = *type;
    b.info.dims = {cols, heads * head_dim};
    b.info.data = owned->data();
    b.info.num_bytes = owned->size();
    b.owned = std::move(owned);
    return b;
  }

  static Built owned_f32(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& values) {
    auto owned = std::make_shared<std::vector<uint8_t>>(values.size() * sizeof(float));
    std::memcpy(owned->data(), values.data(), owned->size());
    Built b;
    b.info.name = name;
    b.info.type = DType::F32;
    b.info.dims = std::move(dims);
    b.info.data = owned->data();
    b.info.num_bytes = owned->size();
    b.owned = std::move(owned);
    return b;
  }

 private:
  void check_shape(const safetensors::Tensor& t, const std::vector<int64_t>& shape) const {
    if (t.shape != shape) {
      fail("{}: tensor '{}' has shape [{}] but the config implies [{}]", folder_, t.name,
           fmt::join(t.shape, ", "), fmt::join(shape, ", "));
    }
  }
  std::vector<float> floats(const safetensors::Tensor& t) const {
    if (!t.float_type()) fail("{}: tensor '{}' has dtype {}; expected F32, F16 or BF16", folder_, t.name, t.dtype);
    std::vector<float> out(static_cast<size_t>(t.num_elements()));
    for (size_t i = 0; i < out.size(); ++i) out[i] = t.float_at(int64_t(i));
    return out;
  }

  const safetensors::SafetensorsModel& st_;
  std::string folder_;
  std::string prefix_;
  HfQuantization quantization_;
};

}  // namespace

bool is_hf_folder(const std::string& path) {
  return fs::is_directory(path) && fs::exists(fs::path(path) / "config.json");
}

std::unique_ptr<gguf::GgufFile> load_hf_folder(const std::string& folder, FileResidency residency) {
  const fs::path config_path = fs::path(folder) / "config.json";
  json raw = read_json(config_path);
  if (!raw.contains("architectures") || !raw["architectures"].is_array() || raw["architectures"].empty() ||
      !raw["architectures"][0].is_string()) {
    fail("{}: missing config key 'architectures'", config_path.string());
  }
  const std::string hf_arch = raw["architectures"][0].get<std::string>();
  const json raw_config = raw;  // quantization_config sits at the top level (not in text_config)
  const Architecture* arch = nullptr;
  for (const Architecture& a : kArchitectures) {
    if (hf_arch == a.hf_name) arch = &a;
  }
  if (arch == nullptr) {
    fail("{}: unknown architecture '{}' (supported: LlamaForCausalLM, MistralForCausalLM, "
         "Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM)",
         config_path.string(), hf_arch);
  }
  // Multimodal Gemma 3 keeps the language model's settings in text_config.
  std::string prefix = "model.";
  if (hf_arch == "Gemma3ForConditionalGeneration") {
    if (!raw.contains("text_config")) fail("{}: missing config key 'text_config'", config_path.string());
    raw = raw["text_config"];
    prefix = "language_model.model.";
  }
  const Config c(raw, config_path.string());
  const std::string a = arch->gguf_name;
  const bool gemma = a == "gemma3";

  const int64_t n_embd = c.integer("hidden_size");
  const int64_t n_layer = c.integer("num_hidden_layers");
  const int64_t n_head = c.integer("num_attention_heads");
  const int64_t n_head_kv = c.integer_or("num_key_value_heads", n_head);
  const int64_t n_ff = c.integer("intermediate_size");
  const int64_t head_dim = c.integer_or("head_dim", n_embd / n_head);
  const int64_t n_vocab = c.integer("vocab_size");
  const double rope_theta = c.number_or("rope_theta", 10000.0);
  const int64_t n_rot = int64_t(double(head_dim) * c.number_or("partial_rotary_factor", 1.0));

  Metadata md;
  md.str("general.architecture", a);
  md.str("general.name", fs::path(folder).filename().string());
  md.u32(a + ".context_length", c.integer_or("max_position_embeddings", 2048));
  md.u32(a + ".embedding_length", n_embd);
  md.u32(a + ".block_count", n_layer);
  md.u32(a + ".feed_forward_length", n_ff);
  md.u32(a + ".attention.head_count", n_head);
  md.u32(a + ".attention.head_count_kv", n_head_kv);
  md.u32(a + ".attention.key_length", head_dim);
  md.u32(a + ".attention.value_length", head_dim);
  md.f32(a + ".attention.layer_norm_rms_epsilon", c.number_or("rms_norm_eps", 1e-6));
  md.f32(a + ".rope.freq_base", rope_theta);
  md.u32(a + ".rope.dimension_count", n_rot);
  std::vector<float> rope_divisors;
  if (c.has("rope_scaling")) {
    const json& scaling = raw["rope_scaling"];
    const std::string type = scaling.value("rope_type", scaling.value("type", ""));
    if (type == "linear") {
      md.str(a + ".rope.scaling.type", "linear");
      md.f32(a + ".rope.scaling.factor", scaling.value("factor", 1.0));
    } else if (type == "llama3") {
      rope_divisors = llama3_rope_divisors(scaling, rope_theta, n_rot, config_path.string());
    } else if (!type.empty() && type != "default") {
      fail("{}: rope_scaling type '{}' is not supported (linear, llama3)", config_path.string(), type);
    }
  }
  // Sliding windows: Mistral (every layer), Qwen2 only with use_sliding_window, Gemma 3 by pattern.
  const bool window_used = c.has("sliding_window") && (a != "qwen2" || raw.value("use_sliding_window", false));
  if (window_used) {
    md.u32(a + ".attention.sliding_window", c.integer("sliding_window"));
    if (raw.contains("layer_types") && raw["layer_types"].is_array()) {
      std::vector<gguf::Value> flags;
      for (const json& t : raw["layer_types"]) flags.push_back(gguf::Value::of_bool(t == "sliding_attention"));
      if (int64_t(flags.size()) != n_layer) fail("{}: layer_types must have one entry per layer", config_path.string());
      md.set(a + ".attention.sliding_window_pattern", gguf::Value::of_array(gguf::ValueType::Bool, std::move(flags)));
    } else if (c.has("sliding_window_pattern")) {
      md.u32(a + ".attention.sliding_window_pattern", c.integer("sliding_window_pattern"));
    }
  }
  if (gemma && c.has("rope_local_base_freq")) md.f32(a + ".rope.freq_base_swa", c.number("rope_local_base_freq"));
  if (gemma && c.has("query_pre_attn_scalar")) {  // queries are scaled by its -1/2 power
    const double scalar = c.number("query_pre_attn_scalar");
    if (!(scalar > 0)) fail("{}: config key 'query_pre_attn_scalar' must be positive", config_path.string());
    md.f32(a + ".attention.scale", 1.0 / std::sqrt(scalar));
  }
  if (c.has("final_logit_softcapping")) md.f32(a + ".final_logit_softcapping", c.number("final_logit_softcapping"));
  append_hf_tokenizer_metadata(folder, md.items());

  // Tensors.
  const HfQuantization quantization = parse_hf_quantization(raw_config, folder);
  auto st = std::shared_ptr<safetensors::SafetensorsModel>(safetensors::SafetensorsModel::open_folder(folder, residency));
  TensorBuilder tb(*st, folder, prefix, quantization);
  std::vector<Built> built;
  std::vector<std::string> fallbacks;
  const float norm_add = gemma ? 1.0f : 0.0f;
  built.push_back(tb.in_place("embed_tokens.weight", "token_embd.weight", {n_vocab, n_embd}));
  built.push_back(tb.as_f32("norm.weight", "output_norm.weight", n_embd, norm_add));
  const bool tied = raw.value("tie_word_embeddings", gemma);
  const std::string lm_head = hf_arch == "Gemma3ForConditionalGeneration" ? "language_model.lm_head.weight" : "lm_head.weight";
  const std::string lm_head_module = lm_head.substr(0, lm_head.size() - 7);
  if (!tied && (st->find(lm_head) != nullptr || stores_quantized(*st, quantization, lm_head_module))) {
    TensorBuilder root(*st, folder, "", quantization);
    root.linear(lm_head_module, "output.weight", n_vocab, n_embd, built, fallbacks);
  }
  if (!rope_divisors.empty()) {
    built.push_back(TensorBuilder::owned_f32("rope_freqs.weight", {int64_t(rope_divisors.size())}, rope_divisors));
  }
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string h = fmt::format("layers.{}.", i);
    const std::string g = fmt::format("blk.{}.", i);
    built.push_back(tb.as_f32(h + "input_layernorm.weight", g + "attn_norm.weight", n_embd, norm_add));
    const int64_t q_heads = arch->permute_qk ? n_head : 0, k_heads = arch->permute_qk ? n_head_kv : 0;
    tb.linear(h + "self_attn.q_proj", g + "attn_q.weight", n_head * head_dim, n_embd, built, fallbacks, q_heads, head_dim);
    tb.linear(h + "self_attn.k_proj", g + "attn_k.weight", n_head_kv * head_dim, n_embd, built, fallbacks, k_heads, head_dim);
    tb.linear(h + "self_attn.v_proj", g + "attn_v.weight", n_head_kv * head_dim, n_embd, built, fallbacks);
    tb.linear(h + "self_attn.o_proj", g + "attn_output.weight", n_embd, n_head * head_dim, built, fallbacks);
    if (a == "qwen2") {
      built.push_back(tb.as_f32(h + "self_attn.q_proj.bias", g + "attn_q.bias", n_head * head_dim, 0.0f));
      built.push_back(tb.as_f32(h + "self_attn.k_proj.bias", g + "attn_k.bias", n_head_kv * head_dim, 0.0f));
      built.push_back(tb.as_f32(h + "self_attn.v_proj.bias", g + "attn_v.bias", n_head_kv * head_dim, 0.0f));
    }
    if (a == "qwen3" || gemma) {
      built.push_back(tb.as_f32(h + "self_attn.q_norm.weight", g + "attn_q_norm.weight", head_dim, norm_add));
      built.push_back(tb.as_f32(h + "self_attn.k_norm.weight", g + "attn_k_norm.weight", head_dim, norm_add));
    }
    if (gemma) {
      built.push_back(tb.as_f32(h + "post_attention_layernorm.weight", g + "post_attention_norm.weight", n_embd, norm_add));
      built.push_back(tb.as_f32(h + "pre_feedforward_layernorm.weight", g + "ffn_norm.weight", n_embd, norm_add));
      built.push_back(tb.as_f32(h + "post_feedforward_layernorm.weight", g + "post_ffw_norm.weight", n_embd, norm_add));
    } else {
      built.push_back(tb.as_f32(h + "post_attention_layernorm.weight", g + "ffn_norm.weight", n_embd, 0.0f));
    }
    tb.linear(h + "mlp.gate_proj", g + "ffn_gate.weight", n_ff, n_embd, built, fallbacks);
    tb.linear(h + "mlp.up_proj", g + "ffn_up.weight", n_ff, n_embd, built, fallbacks);
    tb.linear(h + "mlp.down_proj", g + "ffn_down.weight", n_embd, n_ff, built, fallbacks);
  }
  if (quantization.method != HfQuantization::Method::None) {
    md.str("kestrel.quantization.source", quantization.description);
    std::vector<gguf::Value> names;
    for (std::string& f : fallbacks) names.push_back(gguf::Value::of_string(std::move(f)));
    if (!names.empty()) md.set("kestrel.quantization.fallbacks", gguf::Value::of_array(gguf::ValueType::String, std::move(names)));
  }

  std::vector<gguf::TensorInfo> tensors;
  std::vector<std::shared_ptr<const void>> keep_alive = {st};
  for (Built& b : built) {
    tensors.push_back(std::move(b.info));
    if (b.owned) keep_alive.push_back(std::move(b.owned));
  }
  return gguf::GgufFile::from_parts(folder, std::move(md.items()), std::move(tensors), std::move(keep_alive));
}

}  // namespace kestrel
