#include "model/model.h"

#include <iterator>

#include <fmt/format.h>

#include "core/error.h"
#include "core/progress.h"
#include "loader/hf_folder.h"
#include "quant/format.h"

namespace kestrel {
namespace {

// Touches every page of the tensor data so the first forward pass does not stall on page faults,
// and so the user sees load progress for large files.
void prefault_tensors(const gguf::GgufFile& file) {
  uint64_t total = 0;
  for (const auto& t : file.tensors()) total += t.num_bytes;
  ProgressBar progress("loading", int64_t(total >> 20) + 1);
  uint64_t done = 0;
  volatile uint8_t sink = 0;
  for (const auto& t : file.tensors()) {
    for (uint64_t offset = 0; offset < t.num_bytes; offset += 4096) sink = sink + t.data[offset];
    done += t.num_bytes;
    progress.update(int64_t(done >> 20));
  }
  progress.finish();
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path) {
  std::unique_ptr<Model> model(new Model());
  model->file_ = is_hf_folder(path) ? load_hf_folder(path) : gguf::GgufFile::open(path);
  model->config_ = read_model_config(*model->file_);
  model->load_weights();
  prefault_tensors(*model->file_);
  return model;
}

const float* Model::vector_tensor(const std::string& name, int64_t length) {
  const gguf::TensorInfo* t = file_->find_tensor(name);
  if (t == nullptr) fail("{}: missing tensor '{}'", file_->name(), name);
  if (t->dims.size() != 1 || t->dims[0] != length) {
    fail("{}: tensor '{}' should have shape [{}] but has {} dims (first {})", file_->name(), name,
         length, t->dims.size(), t->dims[0]);
  }
  if (t->type == DType::F32) return reinterpret_cast<const float*>(t->data);
  const quant::WeightFormat* format = quant::find_format(t->type);
  if (format == nullptr) {
    fail("{}: tensor '{}' has type {}, which Kestrel cannot read", file_->name(), name,
         dtype_name(t->type));
  }
  std::vector<float>& owned = owned_vectors_.emplace_back(size_t(length));
  format->dequantize_row(t->data, owned.data(), length);
  return owned.data();
}

WeightView Model::matrix_tensor(const std::string& name, int64_t rows, int64_t cols) {
  const gguf::TensorInfo* t = file_->find_tensor(name);
  if (t == nullptr) fail("{}: missing tensor '{}'", file_->name(), name);
  if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
    std::string shape;
    for (int64_t d : t->dims) shape += fmt::format("{}{}", shape.empty() ? "" : ", ", d);
    fail("{}: tensor '{}' should have shape [{}, {}] (GGUF order) but has [{}]", file_->name(),
         name, cols, rows, shape);
  }
  if (quant::find_format(t->type) == nullptr) {
    fail("{}: tensor '{}' has type {}, which Kestrel cannot compute with yet", file_->name(), name,
         dtype_name(t->type));
  }
  return WeightView{t->type, rows, cols, t->data};
}

// Tensor names are GGUF's (llama.cpp's) and the same across architectures; which optional
// tensors must exist follows from the config's feature flags.
void Model::load_weights() {
  ModelConfig& c = config_;
  const gguf::TensorInfo* embd = file_->find_tensor("token_embd.weight");
  if (embd == nullptr) fail("{}: missing tensor 'token_embd.weight'", file_->name());
  if (embd->dims.size() != 2) fail("{}: tensor 'token_embd.weight' must be 2-D", file_->name());
  c.n_vocab = embd->dims[1];
  if (const gguf::Array* tokens = file_->get_array("tokenizer.ggml.tokens");
      tokens != nullptr && int64_t(tokens->items.size()) != c.n_vocab) {
    fail("{}: the vocabulary has {} tokens but token_embd.weight has {} rows", file_->name(),
         tokens->items.size(), c.n_vocab);
  }
  weights_.token_embd = matrix_tensor("token_embd.weight", c.n_vocab, c.n_embd);
  weights_.output_norm = vector_tensor("output_norm.weight", c.n_embd);
  if (file_->find_tensor("output.weight") != nullptr) {
    weights_.output = matrix_tensor("output.weight", c.n_vocab, c.n_embd);
  } else {
    weights_.output = weights_.token_embd;
    weights_.tied_output = true;
  }
  if (file_->find_tensor("rope_freqs.weight") != nullptr) {
    weights_.rope_freq_factors = vector_tensor("rope_freqs.weight", c.n_rot / 2);
  }
  weights_.layers.resize(size_t(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    LayerWeights& l = weights_.layers[size_t(i)];
    l.attn_norm = vector_tensor(p + "attn_norm.weight", c.n_embd);
    l.wq = matrix_tensor(p + "attn_q.weight", c.q_width(), c.n_embd);
    l.wk = matrix_tensor(p + "attn_k.weight", c.kv_width(), c.n_embd);
    l.wv = matrix_tensor(p + "attn_v.weight", c.kv_width(), c.n_embd);
    if (c.qkv_bias) {
      l.bq = vector_tensor(p + "attn_q.bias", c.q_width());
      l.bk = vector_tensor(p + "attn_k.bias", c.kv_width());
      l.bv = vector_tensor(p + "attn_v.bias", c.kv_width());
    }
    if (c.qk_norm) {
      l.q_norm = vector_tensor(p + "attn_q_norm.weight", c.head_dim);
      l.k_norm = vector_tensor(p + "attn_k_norm.weight", c.head_dim);
    }
    l.wo = matrix_tensor(p + "attn_output.weight", c.n_embd, c.q_width());
    l.ffn_norm = vector_tensor(p + "ffn_norm.weight", c.n_embd);
    l.w_gate = matrix_tensor(p + "ffn_gate.weight", c.n_ff, c.n_embd);
    l.w_up = matrix_tensor(p + "ffn_up.weight", c.n_ff, c.n_embd);
    l.w_down = matrix_tensor(p + "ffn_down.weight", c.n_embd, c.n_ff);
    if (c.post_norms) {
      l.post_attn_norm = vector_tensor(p + "post_attention_norm.weight", c.n_embd);
      l.post_ffn_norm = vector_tensor(p + "post_ffw_norm.weight", c.n_embd);
    }
  }
}

int64_t Model::parameter_count() const {
  int64_t count = 0;
  for (const auto& t : file_->tensors()) count += t.num_elements;
  return count;
}

KvLayout Model::kv_layout(int64_t rolling_window, int sink_tokens) const {
  const ModelConfig& c = config_;
  KvLayout layout;
  int full = -1, sliding = -1;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    int& group = c.is_sliding(il) ? sliding : full;
    if (group < 0) {
      group = int(layout.group_windows.size());
      const int window = c.is_sliding(il) ? c.sliding_window : 0;
      // A rolling window bounds every layer that would otherwise see more than it.
      const bool rolls = rolling_window > 0 && (window == 0 || window >= rolling_window);
      layout.group_windows.push_back(rolls ? int(rolling_window) : window);
      layout.group_sinks.push_back(rolls ? sink_tokens : 0);
    }
    layout.layer_group.push_back(group);
  }
  // Keep full attention as group 0 when both kinds exist (the prefix cache lives there).
  if (full > 0) {
    std::swap(layout.group_windows[0], layout.group_windows[1]);
    std::swap(layout.group_sinks[0], layout.group_sinks[1]);
    for (int& g : layout.layer_group) g = 1 - g;
  }
  return layout;
}

KvCacheSpec Model::kv_spec(DType k_type, DType v_type, int block_size) const {
  KvCacheSpec spec;
  spec.k_type = k_type;
  spec.v_type = v_type;
  spec.block_size = block_size;
  spec.n_kv_head = config_.n_head_kv;
  spec.head_dim = config_.head_dim;
  return spec;
}

int64_t Model::weight_bytes() const {
  int64_t bytes = 0;
  for (const auto& t : file_->tensors()) bytes += int64_t(t.num_bytes);
  return bytes;
}

}  // namespace kestrel

namespace kestrel {

WeightView& LayerWeights::matrix(LinearKind kind) {
  switch (kind) {
    case LinearKind::AttnQ: return wq;
    case LinearKind::AttnK: return wk;
    case LinearKind::AttnV: return wv;
    case LinearKind::AttnOutput: return wo;
    case LinearKind::FfnGate: return w_gate;
    case LinearKind::FfnUp: return w_up;
    case LinearKind::FfnDown: return w_down;
    case LinearKind::Output: break;
  }
  fail("internal: the output head is not a layer matrix");
}

WeightView Model::replace_matrix(const std::string& name, const WeightView& w) {
  WeightView* target = nullptr;
  if (name == "token_embd.weight") {
    target = &weights_.token_embd;
  } else if (name == "output.weight" && !weights_.tied_output) {
    target = &weights_.output;
  }
  // Layer matrices by the same names the forward pass reports.
  for (size_t il = 0; target == nullptr && il < weights_.layers.size(); ++il) {
    for (LinearKind k : {LinearKind::AttnQ, LinearKind::AttnK, LinearKind::AttnV, LinearKind::AttnOutput,
                         LinearKind::FfnGate, LinearKind::FfnUp, LinearKind::FfnDown}) {
      if (linear_tensor_name(int64_t(il), k) == name) target = &weights_.layers[il].matrix(k);
    }
  }
  if (target == nullptr) fail("{}: no matrix '{}' to replace", file_->name(), name);
  if (w.rows != target->rows || w.cols != target->cols) {
    fail("{}: replacement for '{}' is {} x {}, the model's is {} x {}", file_->name(), name, w.rows,
         w.cols, target->rows, target->cols);
  }
  if (quant::find_format(w.type) == nullptr) fail("replacement for '{}': type {} has no kernels", name, dtype_name(w.type));
  const WeightView old = *target;
  *target = w;
  if (target == &weights_.token_embd && weights_.tied_output) weights_.output = w;
  return old;
}

}  // namespace kestrel
