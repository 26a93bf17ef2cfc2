#include "model/moe_weights.h"

#include <fmt/format.h>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "model/tensor_views.h"

namespace kestrel {
namespace {

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
  if (arch == "deepseek2") {
    // DeepSeek's shared experts are one MLP of expert_shared_count experts' width, ungated.
    m.n_ff_shared = m.n_ff_expert * moe_key(file, p + "expert_shared_count", 0);
    m.shared_gated = false;
  }
  // The router's normalization, scale and gating: llama.cpp reads the keys only for deepseek2 and
  // hard-codes the others' in their graphs (Mixtral and Qwen3-MoE renormalize, Qwen2-MoE and OLMoE
  // do not; softmax, no scale), whatever a file says (its model saver writes expert_weights_norm
  // false for Mixtral). DeepSeek-V2 does not renormalize unless the key says so (V3's does).
  m.normalize_top_k = arch != "qwen2moe" && arch != "olmoe" && arch != "deepseek2";
  if (arch == "deepseek2") {
    m.normalize_top_k = file.get_bool(p + "expert_weights_norm").value_or(false);
    if (auto scale = file.get_float(p + "expert_weights_scale"); scale && *scale != 0.0) {
      if (!(*scale > 0.0)) fail("{}: {}expert_weights_scale {} must be positive", file.name(), p, *scale);
      m.weights_scale = float(*scale);
    }
    // llama.cpp's gating ids: 0 none (softmax here), 1 softmax, 2 sigmoid; 3 (softmax over the
    // chosen experts' logits) and 4 (sqrt softplus) are other families'.
    const uint64_t gating = file.get_uint(p + "expert_gating_func").value_or(0);
    if (gating > 2) {
      fail("{}: {}expert_gating_func {} is not supported (supported: 1 softmax, 2 sigmoid)", file.name(), p, gating);
    }
    if (gating == 2) m.gating = MoeConfig::Gating::Sigmoid;
  }
  // Groups (llama.cpp reads them for every architecture; a count of 0 or 1, which its model saver
  // writes for every MoE file, means none). The group score follows the gating: DeepSeek-V2's
  // softmax routers rank groups by their best expert, DeepSeek-V3's sigmoid ones by their best two
  // (llama.cpp uses the best two for both).
  const int64_t groups = moe_key(file, p + "expert_group_count", 0);
  if (groups > 1) {
    m.n_group = groups;
    m.n_group_used = moe_key(file, p + "expert_group_used_count", groups);
    if (m.n_expert % m.n_group != 0) {
      fail("{}: {}expert_group_count {} must divide {}expert_count {}", file.name(), p, m.n_group, p, m.n_expert);
    }
    if (m.n_group_used < 1 || m.n_group_used > m.n_group) {
      fail("{}: {}expert_group_used_count {} must be between 1 and {}expert_group_count {}", file.name(), p,
           m.n_group_used, p, m.n_group);
    }
    if (m.n_expert_used > m.n_group_used * (m.n_expert / m.n_group)) {
      fail("{}: {}expert_used_count {} exceeds the {} experts of {} of {} groups", file.name(), p, m.n_expert_used,
           m.n_group_used * (m.n_expert / m.n_group), m.n_group_used, m.n_group);
    }
  }
  m.group_score = m.gating == MoeConfig::Gating::Sigmoid ? MoeConfig::GroupScore::TopTwoSum : MoeConfig::GroupScore::Max;
  if (m.group_limited() && m.group_score == MoeConfig::GroupScore::TopTwoSum && m.n_expert / m.n_group < 2) {
    fail("{}: {}expert_group_count {}: a group of one expert has no best two", file.name(), p, m.n_group);
  }
  return m;
}

WeightView MoeLayerWeights::expert_rows(const WeightView& stack, int64_t e, int64_t rows) {
  return stacked_matrix(stack, e, rows);
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
  w.n_out = c.n_embd;
  const gguf::TensorInfo& router = require_tensor(file, p + "ffn_gate_inp.weight", "router");
  if (router.dims.size() == 2 && router.dims[0] == c.n_embd && router.dims[1] != m.n_expert) {
    fail("{}: tensor '{}' scores {} experts but {} is {}", file.name(), router.name, router.dims[1], count_key,
         m.n_expert);
  }
  w.router = matrix_view(file, p + "ffn_gate_inp.weight", m.n_expert, c.n_embd, "router");
  w.gate_stack = stack_view(file, p + "ffn_gate_exps.weight", m.n_expert, m.n_ff_expert, c.n_embd, count_key, "experts");
  w.up_stack = stack_view(file, p + "ffn_up_exps.weight", m.n_expert, m.n_ff_expert, c.n_embd, count_key, "experts");
  w.down_stack = stack_view(file, p + "ffn_down_exps.weight", m.n_expert, c.n_embd, m.n_ff_expert, count_key, "experts");
  if (file.find_tensor(p + "exp_probs_b.bias") != nullptr) {
    w.selection_bias = vector_view(file, p + "exp_probs_b.bias", m.n_expert, "expert selection bias", owned_vectors);
  }
  const bool shared = c.architecture == "qwen2moe" || file.find_tensor(p + "ffn_up_shexp.weight") != nullptr ||
                      m.n_ff_shared > 0;
  if (shared) {
    const int64_t n_sh = m.n_ff_shared > 0 ? m.n_ff_shared : c.n_ff;
    w.shared_gate = matrix_view(file, p + "ffn_gate_shexp.weight", n_sh, c.n_embd, "shared expert");
    w.shared_up = matrix_view(file, p + "ffn_up_shexp.weight", n_sh, c.n_embd, "shared expert");
    w.shared_down = matrix_view(file, p + "ffn_down_shexp.weight", c.n_embd, n_sh, "shared expert");
    if (m.shared_gated) {
      w.shared_gate_inp = WeightView{DType::F32, 1, c.n_embd,
                                     vector_view(file, p + "ffn_gate_inp_shexp.weight", c.n_embd, "shared expert gate", owned_vectors)};
    }
  }
  return w;
}

}  // namespace kestrel
