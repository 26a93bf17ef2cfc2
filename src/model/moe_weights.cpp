#include "model/moe_weights.h"

#include <fmt/format.h>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "quant/format.h"

namespace kestrel {
namespace {

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string text;
  for (int64_t d : dims) text += fmt::format("{}{}", text.empty() ? "" : ", ", d);
  return text;
}

int64_t moe_key(const gguf::GgufFile& file, const std::string& key, int64_t fallback) {
  const gguf::Value* v = file.find(key);
  if (v == nullptr) return fallback;
  // llama.cpp allows a per-layer array for some keys; Kestrel runs one size for every layer.
  if (const gguf::Array* values = v->as_array()) {
    if (values->items.empty()) fail("{}: metadata key '{}' is an empty array", file.name(), key);
    const auto first = values->items[0].as_uint();
    for (const gguf::Value& item : values->items) {
      if (!item.as_uint() || item.as_uint() != first) {
        fail("{}: metadata key '{}' differs between layers; not supported", file.name(), key);
      }
    }
    if (*first > (uint64_t(1) << 31)) fail("{}: metadata key '{}' has an invalid value {}", file.name(), key, *first);
    return int64_t(*first);
  }
  const auto value = v->as_uint();
  if (!value || *value > (uint64_t(1) << 31)) fail("{}: metadata key '{}' must be a count", file.name(), key);
  return int64_t(*value);
}

const gguf::TensorInfo& require_tensor(const gguf::GgufFile& file, const std::string& name, const std::string& what) {
  const gguf::TensorInfo* t = file.find_tensor(name);
  if (t == nullptr) fail("{}: missing tensor '{}' ({})", file.name(), name, what);
  if (quant::find_format(t->type) == nullptr) {
    fail("{}: tensor '{}' has type {}, which Kestrel cannot compute with yet", file.name(), name, dtype_name(t->type));
  }
  return *t;
}

// A 2-D matrix [rows][cols] (GGUF dims [cols, rows]).
WeightView matrix(const gguf::GgufFile& file, const std::string& name, int64_t rows, int64_t cols, const std::string& what) {
  const gguf::TensorInfo& t = require_tensor(file, name, what);
  if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows) {
    fail("{}: tensor '{}' ({}) should have shape [{}, {}] (GGUF order) but has [{}]", file.name(), name, what,
         cols, rows, shape_text(t.dims));
  }
  return WeightView{t.type, rows, cols, t.data};
}

// A stack of n_expert matrices [rows][cols] (GGUF dims [cols, rows, n_expert]) as one 2-D view.
WeightView expert_stack(const gguf::GgufFile& file, const std::string& name, int64_t n_expert, int64_t rows,
                        int64_t cols, const std::string& count_key) {
  const gguf::TensorInfo& t = require_tensor(file, name, "experts");
  if (t.dims.size() != 3) {
    fail("{}: tensor '{}' should be 3-D [{}, {}, {}] (GGUF order: columns, rows, experts) but has [{}]",
         file.name(), name, cols, rows, n_expert, shape_text(t.dims));
  }
  if (t.dims[2] != n_expert) {
    fail("{}: tensor '{}' holds {} experts but {} is {}", file.name(), name, t.dims[2], count_key, n_expert);
  }
  if (t.dims[0] != cols || t.dims[1] != rows) {
    fail("{}: tensor '{}' should have shape [{}, {}, {}] (GGUF order) but has [{}]", file.name(), name, cols,
         rows, n_expert, shape_text(t.dims));
  }
  return WeightView{t.type, n_expert * rows, cols, t.data};
}

// A 1-D tensor of `length` values as F32 (GGUF dims [length] or [length, 1]).
const float* vector_of(const gguf::GgufFile& file, const std::string& name, int64_t length,
                       std::vector<std::vector<float>>& owned) {
  const gguf::TensorInfo& t = require_tensor(file, name, "shared expert gate");
  const bool shape_ok = (t.dims.size() == 1 && t.dims[0] == length) ||
                        (t.dims.size() == 2 && t.dims[0] == length && t.dims[1] == 1);
  if (!shape_ok) {
    fail("{}: tensor '{}' should have shape [{}] but has [{}]", file.name(), name, length, shape_text(t.dims));
  }
  if (t.type == DType::F32) return reinterpret_cast<const float*>(t.data);
  std::vector<float>& values = owned.emplace_back(size_t(length));
  quant::require_format(t.type).dequantize_row(t.data, values.data(), length);
  return values.data();
}

}  // namespace

MoeConfig read_moe_config(const gguf::GgufFile& file, const std::string& arch, int64_t n_ff) {
  const std::string p = arch + ".";
  const bool qwen_moe = arch == "qwen2moe" || arch == "qwen3moe";
  const bool moe_only = qwen_moe || arch == "olmoe";  // architectures that are always MoE
  MoeConfig m;
  m.n_expert = moe_key(file, p + "expert_count", 0);
  if (m.n_expert == 0) {
    if (moe_only) fail("{}: architecture '{}' needs {}expert_count > 0", file.name(), arch, p);
    return m;
  }
  m.n_expert_used = moe_key(file, p + "expert_used_count", 0);
  if (m.n_expert_used < 1 || m.n_expert_used > m.n_expert) {
    fail("{}: {}expert_used_count {} must be between 1 and {}expert_count {}", file.name(), p, m.n_expert_used, p,
         m.n_expert);
  }
  // Without the key llama.cpp takes n_ff for Mixtral (whose experts are the FFN) and
  // n_ff / n_expert_used for the Qwen MoE models.
  m.n_ff_expert = moe_key(file, p + "expert_feed_forward_length", qwen_moe ? n_ff / m.n_expert_used : n_ff);
  if (m.n_ff_expert <= 0) fail("{}: {}expert_feed_forward_length must be positive", file.name(), p);
  if (arch == "qwen2moe") m.n_ff_shared = moe_key(file, p + "expert_shared_feed_forward_length", n_ff);
  // llama.cpp's converter writes no expert_weights_norm for these: Qwen2-MoE's and OLMoE's
  // norm_topk_prob is false, Qwen3-MoE's and Mixtral's true (as llama.cpp's graphs hard-code).
  m.normalize_top_k = file.get_bool(p + "expert_weights_norm").value_or(arch != "qwen2moe" && arch != "olmoe");
  if (auto scale = file.get_float(p + "expert_weights_scale"); scale && *scale != 0.0) {
    if (!(*scale > 0.0)) fail("{}: {}expert_weights_scale {} must be positive", file.name(), p, *scale);
    m.weights_scale = float(*scale);
  }
  // llama.cpp's gating function ids: 0 none (the architecture's default, softmax here), 1 softmax.
  if (auto gating = file.get_uint(p + "expert_gating_func"); gating && *gating > 1) {
    fail("{}: {}expert_gating_func {} is not supported (supported: softmax)", file.name(), p, *gating);
  }
  return m;
}

WeightView MoeLayerWeights::expert_rows(const WeightView& stack, int64_t e, int64_t rows) {
  const int64_t row_bytes = quant::row_bytes(quant::require_format(stack.type), stack.cols);
  return WeightView{stack.type, rows, stack.cols, static_cast<const uint8_t*>(stack.data) + e * rows * row_bytes};
}

bool is_moe_layer(const gguf::GgufFile& file, const ModelConfig& c, int64_t layer) {
  return c.moe.enabled() && file.find_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", layer)) != nullptr;
}

MoeLayerWeights load_moe_layer(const gguf::GgufFile& file, const ModelConfig& c, int64_t layer,
                               std::vector<std::vector<float>>& owned_vectors) {
  const MoeConfig& m = c.moe;
  const std::string p = fmt::format("blk.{}.", layer);
  const std::string count_key = c.architecture + ".expert_count";
  MoeLayerWeights w;
  w.n_expert = m.n_expert;
  w.n_ff_expert = m.n_ff_expert;
  w.n_embd = c.n_embd;
  const gguf::TensorInfo& router = require_tensor(file, p + "ffn_gate_inp.weight", "router");
  if (router.dims.size() == 2 && router.dims[0] == c.n_embd && router.dims[1] != m.n_expert) {
    fail("{}: tensor '{}' scores {} experts but {} is {}", file.name(), router.name, router.dims[1], count_key,
         m.n_expert);
  }
  w.router = matrix(file, p + "ffn_gate_inp.weight", m.n_expert, c.n_embd, "router");
  w.gate_stack = expert_stack(file, p + "ffn_gate_exps.weight", m.n_expert, m.n_ff_expert, c.n_embd, count_key);
  w.up_stack = expert_stack(file, p + "ffn_up_exps.weight", m.n_expert, m.n_ff_expert, c.n_embd, count_key);
  w.down_stack = expert_stack(file, p + "ffn_down_exps.weight", m.n_expert, c.n_embd, m.n_ff_expert, count_key);
  const bool shared = c.architecture == "qwen2moe" || file.find_tensor(p + "ffn_up_shexp.weight") != nullptr;
  if (shared) {
    const int64_t n_sh = m.n_ff_shared > 0 ? m.n_ff_shared : c.n_ff;
    w.shared_gate = matrix(file, p + "ffn_gate_shexp.weight", n_sh, c.n_embd, "shared expert");
    w.shared_up = matrix(file, p + "ffn_up_shexp.weight", n_sh, c.n_embd, "shared expert");
    w.shared_down = matrix(file, p + "ffn_down_shexp.weight", c.n_embd, n_sh, "shared expert");
    w.shared_gate_inp = WeightView{DType::F32, 1, c.n_embd,
                                   vector_of(file, p + "ffn_gate_inp_shexp.weight", c.n_embd, owned_vectors)};
  }
  return w;
}

}  // namespace kestrel
