#include "model/model_config.h"

#include <cmath>

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

// The keys every Llama-like architecture shares.
void read_common(const gguf::GgufFile& file, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  c.n_embd = require_positive(file, p + "embedding_length");
  c.n_layer = require_positive(file, p + "block_count");
  c.n_ff = require_positive(file, p + "feed_forward_length");
  c.n_head = require_positive(file, p + "attention.head_count");
  c.n_head_kv = optional_positive(file, p + "attention.head_count_kv", c.n_head);
  c.n_ctx_train = require_positive(file, p + "context_length");
  if (c.n_embd % c.n_head != 0 && !file.get_uint(p + "attention.key_length")) {
    fail("{}: {}embedding_length {} is not divisible by attention.head_count {}", file.name(), p,
         c.n_embd, c.n_head);
  }
  c.head_dim = optional_positive(file, p + "attention.key_length", c.n_embd / c.n_head);
  if (auto value_length = file.get_uint(p + "attention.value_length");
      value_length && int64_t(*value_length) != c.head_dim) {
    fail("{}: attention.value_length {} differs from key_length {}; not supported", file.name(),
         *value_length, c.head_dim);
  }
  if (c.n_head % c.n_head_kv != 0) {
    fail("{}: attention.head_count {} is not a multiple of attention.head_count_kv {}", file.name(),
         c.n_head, c.n_head_kv);
  }
  c.rms_eps = float(file.require_float(p + "attention.layer_norm_rms_epsilon"));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) {
    fail("{}: attention.layer_norm_rms_epsilon {} is out of range", file.name(), c.rms_eps);
  }
  c.n_rot = int(file.get_uint(p + "rope.dimension_count").value_or(uint64_t(c.head_dim)));
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    fail("{}: rope.dimension_count {} must be even and at most the head size {}", file.name(),
         c.n_rot, c.head_dim);
  }
  c.rope_freq_base = float(file.get_float(p + "rope.freq_base").value_or(10000.0));
  if (auto type = file.get_string(p + "rope.scaling.type"); type && *type != "none") {
    if (*type != "linear") {
      fail("{}: rope.scaling.type '{}' is not supported (supported: none, linear)", file.name(), *type);
    }
    const double factor = file.require_float(p + "rope.scaling.factor");
    if (!(factor > 0.0)) fail("{}: rope.scaling.factor {} must be positive", file.name(), factor);
    c.rope_freq_scale = float(1.0 / factor);
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

// Each supported architecture: what differs from Llama. The forward pass is shared.
void apply_architecture(const gguf::GgufFile& file, ModelConfig& c) {
  const std::string& a = c.architecture;
  if (a == "llama" || a == "mistral") {
    // Mistral: an optional sliding window, on every layer unless a pattern says otherwise.
    if (c.sliding_window > 0) read_sliding_pattern(file, c, 0);
    return;
  }
  if (a == "qwen2") {
    c.qkv_bias = true;
    c.rope_neox = true;
    return;
  }
  if (a == "qwen3") {
    c.qk_norm = true;
    c.rope_neox = true;
    return;
  }
  if (a == "gemma3") {
    c.qk_norm = true;
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
  static const std::vector<std::string> kNames = {"llama", "mistral", "qwen2", "qwen3", "gemma3"};
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
  if (auto softcap = file.get_float(c.architecture + ".final_logit_softcapping")) {
    c.final_logit_softcap = float(*softcap);
  }
  c.n_vocab = 0;  // set from the embedding tensor by the weight loader
  return c;
}

}  // namespace kestrel
