#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "core/progress.h"
#include "loader/hf_folder.h"
#include "loader/hf_quantized.h"
#include "model/compute_encodings.h"
#include "quant/format.h"

namespace kestrel {
namespace {

// Touches every page of the weights this rank computes with (its shard, not the whole file), so
// the first forward pass does not stall on page faults, and so the user sees load progress for
// large files.
void prefault_weights(const ModelWeights& w) {
  std::vector<std::pair<const uint8_t*, uint64_t>> ranges;
  auto add = [&](const WeightView& v) {
    if (v.data == nullptr) return;
    const quant::WeightFormat& format = quant::require_format(v.type);
    ranges.emplace_back(static_cast<const uint8_t*>(v.data), uint64_t(v.rows * quant::row_bytes(format, v.cols)));
  };
  add(w.token_embd);
  if (!w.tied_output) add(w.output);
  for (const LayerWeights& l : w.layers) for_each_layer_matrix(l, add);
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.second;
  ProgressBar progress("loading", int64_t(total >> 20) + 1);
  uint64_t done = 0;
  volatile uint8_t sink = 0;
  for (const auto& [data, bytes] : ranges) {
    for (uint64_t offset = 0; offset < bytes; offset += 4096) sink = sink + data[offset];
    done += bytes;
    progress.update(int64_t(done >> 20));
  }
  progress.finish();
}

}  // namespace

WeightView slice_columns(const WeightView& w, int64_t begin, int64_t end, std::vector<LargeBuffer>& owned) {
  if (begin == 0 && end == w.cols) return w;
  const quant::WeightFormat& format = quant::require_format(w.type);
  const int64_t src_row = quant::row_bytes(format, w.cols);
  const auto* src = static_cast<const uint8_t*>(w.data);
  if (begin % format.block_size == 0 && end % format.block_size == 0) {
    // Whole blocks: each row's header (per-channel formats) and its blocks [begin, end).
    const int64_t dst_row = quant::row_bytes(format, end - begin);
    LargeBuffer& buffer = owned.emplace_back(size_t(w.rows * dst_row));
    for (int64_t r = 0; r < w.rows; ++r) {
      const uint8_t* row = src + r * src_row;
      uint8_t* out = buffer.data() + r * dst_row;
      std::copy_n(row, format.row_header_bytes, out);
      std::copy_n(row + format.row_header_bytes + begin / format.block_size * format.block_bytes,
                  (end - begin) / format.block_size * format.block_bytes, out + format.row_header_bytes);
    }
    return WeightView{w.type, w.rows, end - begin, buffer.data()};
  }
  // The cut falls inside a block: the slice's exact values in F32.
  LargeBuffer& buffer = owned.emplace_back(size_t(w.rows * (end - begin)) * sizeof(float));
  std::vector<float> row(size_t(w.cols));
  auto* out = reinterpret_cast<float*>(buffer.data());
  for (int64_t r = 0; r < w.rows; ++r) {
    format.dequantize_row(src + r * src_row, row.data(), w.cols);
    std::copy(row.begin() + begin, row.begin() + end, out + r * (end - begin));
  }
  return WeightView{DType::F32, w.rows, end - begin, buffer.data()};
}

std::unique_ptr<Model> Model::load(const std::string& path, const ShardRequest& request, const ModelLoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  const bool folder = is_hf_folder(path);
  const bool whole_file = options.prefault && request.tp_size * request.pp_size == 1;
  const FileResidency residency = weights_residency(path, folder, whole_file, options.weights);
  model->file_ = folder ? load_hf_folder(path, residency) : gguf::GgufFile::open(path, residency);
  model->weights_in_memory_ = residency == FileResidency::Copied;
  model->config_ = read_model_config(*model->file_);
  model->read_vocab_size();
  // The FFN split's unit: whole blocks of ffn_down's format (the same type in every layer of the
  // files llama.cpp writes; a mixed file uses the largest block).
  int64_t ff_align = 1;
  for (int64_t il = 0; il < model->config_.n_layer; ++il) {
    const gguf::TensorInfo* down = model->file_->find_tensor(fmt::format("blk.{}.ffn_down.weight", il));
    if (down == nullptr) continue;
    if (const quant::WeightFormat* f = quant::find_format(down->type)) ff_align = std::max(ff_align, f->block_size);
  }
  // And, where the channel count allows, whole row tiles of the kernels (the largest that fits).
  const int64_t n_ff = model->config_.n_ff;
  for (int64_t tile : {64, 32, 16, 8, 4}) {
    const int64_t unit = std::lcm(ff_align, tile);
    if (n_ff % unit == 0 && n_ff / unit >= request.tp_size) {
      ff_align = unit;
      break;
    }
  }
  if (n_ff % ff_align != 0) ff_align = n_ff;
  model->shard_ = plan_model_shard(model->config_, request.tp_size, request.tp_rank, request.pp_size,
                                   request.pp_rank, ff_align, request.tp_deterministic);
  model->load_weights();
  if (options.compute_encodings) {
    const gguf::GgufFile& file = *model->file_;
    const ComputeEncodingSummary summary = adopt_compute_encodings(
        model->weights_, model->owned_matrices_, [&file](const void* data, size_t bytes) { file.release_pages(data, bytes); });
    model->reencoding_extra_bytes_ = summary.bytes_after - summary.bytes_before;
  }
  if (options.prefault && !model->weights_in_memory_) prefault_weights(model->weights_);
  return model;
}

WeightView Model::rows_of(const WeightView& w, int64_t begin, int64_t end) {
  const int64_t row_bytes = quant::row_bytes(quant::require_format(w.type), w.cols);
  WeightView rows = w;
  rows.rows = end - begin;
  rows.data = static_cast<const uint8_t*>(w.data) + begin * row_bytes;
  return rows;
}

WeightView Model::columns_of(const WeightView& w, int64_t begin, int64_t end) {
  if (w.input_order != nullptr && (begin != 0 || end != w.cols)) {
    fail("{}: a matrix with an input order (a GPTQ act-order checkpoint) cannot be split by columns "
         "over tensor-parallel ranks",
         file_->name());
  }
  return slice_columns(w, begin, end, owned_matrices_);
}

const float* Model::optional_vector(const std::string& name, int64_t length) {
  return file_->find_tensor(name) != nullptr ? vector_tensor(name, length) : nullptr;
}

const float* Model::vector_tensor(const std::string& name, int64_t length, bool flatten) {
  const gguf::TensorInfo* t = file_->find_tensor(name);
  if (t == nullptr) fail("{}: missing tensor '{}'", file_->name(), name);
  if (flatten ? t->num_elements != length : (t->dims.size() != 1 || t->dims[0] != length)) {
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
  return WeightView{t->type, rows, cols, t->data, input_order(name, cols)};
}

// A matrix's optional column order: tensor NAME.input_order (NAME without ".weight"), I32 [cols],
// a permutation of [0, cols) (hf_quantized.h writes it for GPTQ act-order checkpoints).
const int32_t* Model::input_order(const std::string& matrix_name, int64_t cols) {
  const std::string name = input_order_tensor_name(matrix_name);
  const gguf::TensorInfo* t = file_->find_tensor(name);
  if (t == nullptr) return nullptr;
  if (t->type != DType::I32 || t->dims.size() != 1 || t->dims[0] != cols) {
    fail("{}: tensor '{}' must be I32 of shape [{}] (a permutation of the matrix's columns)", file_->name(), name, cols);
  }
  const auto* order = reinterpret_cast<const int32_t*>(t->data);
  std::vector<bool> seen(size_t(cols), false);
  for (int64_t c = 0; c < cols; ++c) {
    if (order[c] < 0 || order[c] >= cols || seen[size_t(order[c])]) {
      fail("{}: tensor '{}' is not a permutation of [0, {}): entry {} is {}", file_->name(), name, cols, c, order[c]);
    }
    seen[size_t(order[c])] = true;
  }
  // Matrices reading one input (Q, K, V; gate, up) usually share a permutation (GPTQ orders by the
  // same Hessian): one pointer for equal orders lets the backend gather and convert the input once.
  for (const gguf::TensorInfo& other : file_->tensors()) {
    if (&other == t) break;
    if (other.type == DType::I32 && other.dims == t->dims && std::memcmp(other.data, t->data, size_t(cols) * 4) == 0) {
      return reinterpret_cast<const int32_t*>(other.data);
    }
  }
  return order;
}

// Tensor names are GGUF's (llama.cpp's) and the same across architectures; which optional
// tensors must exist follows from the config's feature flags.
void Model::read_vocab_size() {
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
}

void Model::load_weights() {
  const ModelConfig& c = config_;
  const ModelShard& sh = shard_;
  const RankSlice& me = sh.mine();
  const WeightView embd_full = matrix_tensor("token_embd.weight", c.n_vocab, c.n_embd);
  const bool tied = file_->find_tensor("output.weight") == nullptr;
  weights_.tied_output = tied;
  // The embedding and the output head are vocabulary-parallel: this rank's rows only.
  if (sh.first_stage() || (tied && sh.last_stage())) {
    weights_.token_embd = rows_of(embd_full, me.vocab_begin, me.vocab_end);
  }
  if (sh.last_stage()) {
    weights_.output_norm = vector_tensor("output_norm.weight", c.n_embd);
    weights_.output_norm_b = optional_vector("output_norm.bias", c.n_embd);
    weights_.output = tied ? rows_of(embd_full, me.vocab_begin, me.vocab_end)
                           : rows_of(matrix_tensor("output.weight", c.n_vocab, c.n_embd), me.vocab_begin, me.vocab_end);
  }
  const bool has_long = file_->find_tensor("rope_factors_long.weight") != nullptr;
  const bool has_short = file_->find_tensor("rope_factors_short.weight") != nullptr;
  if (has_long != has_short) {
    fail("{}: LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight; the file has only {}",
         file_->name(), has_long ? "rope_factors_long.weight" : "rope_factors_short.weight");
  }
  if (has_long) {
    if (c.rope_orig_ctx <= 0) {
      fail("{}: LongRoPE factors without {}.rope.scaling.original_context_length (which picks long or short)",
           file_->name(), c.architecture);
    }
    weights_.rope_factors_long = vector_tensor("rope_factors_long.weight", c.n_rot / 2);
    weights_.rope_factors_short = vector_tensor("rope_factors_short.weight", c.n_rot / 2);
  }
  if (!c.rope_yarn_divisors.empty() && (has_long || file_->find_tensor("rope_freqs.weight") != nullptr)) {
    fail("{}: YaRN scaling together with rope_freqs / LongRoPE factors is not supported", file_->name());
  }
  if (file_->find_tensor("rope_freqs.weight") != nullptr) {
    weights_.rope_freq_factors = vector_tensor("rope_freqs.weight", c.n_rot / 2);
  }
  weights_.layers.resize(size_t(c.n_layer));
  for (int64_t il = sh.layer_begin; il < sh.layer_end; ++il) load_layer(il);
}

void Model::load_layer(int64_t il) {
  const ModelConfig& c = config_;
  const RankSlice& me = shard_.mine();
  const std::string p = fmt::format("blk.{}.", il);
  LayerWeights& l = weights_.layers[size_t(il)];
  // This rank's heads' columns of attn_output (MLA: value heads of v_dim).
  const int64_t out_hd = c.attn_out_width() / c.n_head;
  const int64_t q0 = me.q_head_begin * out_hd, q1 = me.q_head_end * out_hd;
  if (c.input_norms) {
    l.attn_norm = vector_tensor(p + "attn_norm.weight", c.n_embd);
    l.attn_norm_b = optional_vector(p + "attn_norm.bias", c.n_embd);
  }
  if (c.mla.enabled()) {
    load_mla_layer_attention(il);
  } else {
    load_attention(il);
  }
  const WeightView wo = matrix_tensor(p + "attn_output.weight", c.n_embd, c.attn_out_width());
  // Output rows over gathered inputs (whole rows, in place), or row-parallel (Megatron): this
  // rank's input columns, partial sums all-reduced. Row-parallel outputs' biases are added once to
  // the full sums.
  l.wo = shard_.tp_deterministic ? rows_of(wo, me.embd_begin, me.embd_end) : columns_of(wo, q0, q1);
  l.bo = optional_vector(p + "attn_output.bias", c.n_embd);
  if (c.input_norms && !c.parallel_block) {
    l.ffn_norm = vector_tensor(p + "ffn_norm.weight", c.n_embd);
    l.ffn_norm_b = optional_vector(p + "ffn_norm.bias", c.n_embd);
  }
  if (c.post_norms) {
    l.post_attn_norm = vector_tensor(p + "post_attention_norm.weight", c.n_embd);
    l.post_ffn_norm = vector_tensor(p + "post_ffw_norm.weight", c.n_embd);
  }
  if (is_moe_layer(*file_, c, il)) {  // router and experts instead of the dense FFN
    l.moe = load_moe_layer(*file_, c, il, owned_vectors_);
    if (shard_.tp_size > 1) split_moe_layer(l.moe);
    return;
  }
  load_dense_mlp(il);
}

// Latent attention (mla_attention.h). attn_q (if any) is wq, which the per-tensor tools (eval
// --per-tensor) can swap; the other latent tensors they skip. Under --tp each rank computes its
// query heads (their rows of attn_q / attn_q_b, attn_k_b and attn_v_b, in place) against the one
// latent KV head, which every rank computes and caches whole (plan_model_shard gives every rank
// KV head 0: the latent's size does not divide by heads).
void Model::load_mla_layer_attention(int64_t il) {
  LayerWeights& l = weights_.layers[size_t(il)];
  l.mla = load_mla_layer(*file_, config_, il, owned_vectors_, l.wq);
  const RankSlice& me = shard_.mine();
  if (me.n_head() == config_.n_head) return;
  const MlaConfig& m = config_.mla;
  const int64_t h0 = me.q_head_begin, h1 = me.q_head_end, qd = m.q_head_dim();
  if (m.q_lora_rank > 0) {
    l.mla.q_b = rows_of(l.mla.q_b, h0 * qd, h1 * qd);
  } else {
    l.wq = rows_of(l.wq, h0 * qd, h1 * qd);
  }
  l.mla.k_b = rows_of(l.mla.k_b, h0 * m.kv_lora_rank, h1 * m.kv_lora_rank);
  l.mla.v_b = rows_of(l.mla.v_b, h0 * m.v_dim, h1 * m.v_dim);
  l.mla.n_head = me.n_head();
}

void Model::load_attention(int64_t il) {
  const ModelConfig& c = config_;
  const RankSlice& me = shard_.mine();
  const std::string p = fmt::format("blk.{}.", il);
  LayerWeights& l = weights_.layers[size_t(il)];
  const int64_t hd = c.head_dim, qw = c.q_width(), kvw = c.kv_width();
  const int64_t q0 = me.q_head_begin * hd, q1 = me.q_head_end * hd;
  const int64_t kv0 = me.kv_head_begin * hd, kv1 = me.kv_head_end * hd;
  // Q, K and V: three tensors, or one attn_qkv of [qw + 2 kvw] rows (Phi-3) viewed in three parts.
  WeightView q, k, v;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;
  if (file_->find_tensor(p + "attn_qkv.weight") != nullptr) {
    const WeightView qkv = matrix_tensor(p + "attn_qkv.weight", qw + 2 * kvw, c.n_embd);
    q = rows_of(qkv, 0, qw);
    k = rows_of(qkv, qw, qw + kvw);
    v = rows_of(qkv, qw + kvw, qw + 2 * kvw);
    if (const float* b = optional_vector(p + "attn_qkv.bias", qw + 2 * kvw)) {
      bq = b;
      bk = b + qw;
      bv = b + qw + kvw;
    }
  } else {
    q = matrix_tensor(p + "attn_q.weight", qw, c.n_embd);
    k = matrix_tensor(p + "attn_k.weight", kvw, c.n_embd);
    v = matrix_tensor(p + "attn_v.weight", kvw, c.n_embd);
    bq = optional_vector(p + "attn_q.bias", qw);
    bk = optional_vector(p + "attn_k.bias", kvw);
    bv = optional_vector(p + "attn_v.bias", kvw);
  }
  if (c.qkv_bias && (bq == nullptr || bk == nullptr || bv == nullptr)) {
    fail("{}: missing tensor '{}attn_q.bias' / attn_k.bias / attn_v.bias ({} has q/k/v biases)", file_->name(), p,
         c.architecture);
  }
  // Column-parallel: whole heads' and channels' rows, in place.
  l.wq = rows_of(q, q0, q1);
  l.wk = rows_of(k, kv0, kv1);
  l.wv = rows_of(v, kv0, kv1);
  l.bq = bq != nullptr ? bq + q0 : nullptr;
  l.bk = bk != nullptr ? bk + kv0 : nullptr;
  l.bv = bv != nullptr ? bv + kv0 : nullptr;
  switch (c.qk_norm) {
    case QkNorm::None: break;
    case QkNorm::PerHead:
      l.q_norm = vector_tensor(p + "attn_q_norm.weight", hd);
      l.k_norm = vector_tensor(p + "attn_k_norm.weight", hd);
      break;
    case QkNorm::PerHeadEach:  // [n_head][head_dim]: this rank's heads
      l.q_norm = vector_tensor(p + "attn_q_norm.weight", qw, /*flatten=*/true) + q0;
      l.k_norm = vector_tensor(p + "attn_k_norm.weight", kvw, /*flatten=*/true) + kv0;
      break;
    case QkNorm::Full:
      l.q_norm = vector_tensor(p + "attn_q_norm.weight", qw);
      l.k_norm = vector_tensor(p + "attn_k_norm.weight", kvw);
      break;
  }
}

void Model::load_dense_mlp(int64_t il) {
  const ModelConfig& c = config_;
  const RankSlice& me = shard_.mine();
  const std::string p = fmt::format("blk.{}.", il);
  LayerWeights& l = weights_.layers[size_t(il)];
  const WeightView down = matrix_tensor(p + "ffn_down.weight", c.n_embd, c.n_ff);
  l.w_down = shard_.tp_deterministic ? rows_of(down, me.embd_begin, me.embd_end)
                                     : columns_of(down, me.ff_begin, me.ff_end);
  l.b_down = optional_vector(p + "ffn_down.bias", c.n_embd);
  // The MLP's input half: gate and up, or one ffn_up of [2 n_ff] rows holding gate then up
  // (Phi-3), or up alone (a plain MLP).
  WeightView gate, up;
  if (!c.gated_ffn) {
    up = matrix_tensor(p + "ffn_up.weight", c.n_ff, c.n_embd);
  } else if (file_->find_tensor(p + "ffn_gate.weight") == nullptr) {
    const WeightView gate_up = matrix_tensor(p + "ffn_up.weight", 2 * c.n_ff, c.n_embd);
    gate = rows_of(gate_up, 0, c.n_ff);
    up = rows_of(gate_up, c.n_ff, 2 * c.n_ff);
  } else {
    gate = matrix_tensor(p + "ffn_gate.weight", c.n_ff, c.n_embd);
    up = matrix_tensor(p + "ffn_up.weight", c.n_ff, c.n_embd);
  }
  if (c.gated_ffn) l.w_gate = rows_of(gate, me.ff_begin, me.ff_end);
  l.w_up = rows_of(up, me.ff_begin, me.ff_end);
  if (const float* b = optional_vector(p + "ffn_gate.bias", c.n_ff)) l.b_gate = b + me.ff_begin;
  if (const float* b = optional_vector(p + "ffn_up.bias", c.n_ff)) l.b_up = b + me.ff_begin;
}

// The rank's part of a MoE layer, split as the dense FFN is: the router replicated (every rank
// routes the same, bitwise-equal input the same way); Megatron: each expert's (and the shared
// expert's) FFN channels, gate/up rows and down columns, the ranks' partial sums all-reduced;
// --tp-deterministic: gate/up whole, each expert's down rows of this rank's output channels.
void Model::split_moe_layer(MoeLayerWeights& m) {
  const RankSlice& me = shard_.mine();
  if (shard_.tp_deterministic) {
    m.down_stack = expert_rows(m.down_stack, m.n_expert, m.n_out, me.embd_begin, me.embd_end);
    if (m.has_shared_expert()) m.shared_down = rows_of(m.shared_down, me.embd_begin, me.embd_end);
    m.n_out = me.n_embd();
    return;
  }
  const auto [f0, f1] = channel_slice(m.n_ff_expert, m.down_stack.type, "expert");
  m.gate_stack = expert_rows(m.gate_stack, m.n_expert, m.n_ff_expert, f0, f1);
  m.up_stack = expert_rows(m.up_stack, m.n_expert, m.n_ff_expert, f0, f1);
  m.down_stack = columns_of(m.down_stack, f0, f1);  // every expert's columns [f0, f1)
  m.n_ff_expert = f1 - f0;
  if (m.has_shared_expert()) {
    const auto [s0, s1] = channel_slice(m.shared_gate.rows, m.shared_down.type, "shared expert");
    m.shared_gate = rows_of(m.shared_gate, s0, s1);
    m.shared_up = rows_of(m.shared_up, s0, s1);
    m.shared_down = columns_of(m.shared_down, s0, s1);
  }
}

std::pair<int64_t, int64_t> Model::channel_slice(int64_t n_ff, DType down_type, const char* what) const {
  // Whole blocks of the down projection's format, so its column slices stay whole blocks.
  const int64_t align = quant::require_format(down_type).block_size;
  const int64_t units = n_ff % align == 0 ? n_ff / align : 0;
  if (units < shard_.tp_size) {
    fail("{}: --tp {} cannot split the {} FFN's {} channels into whole blocks of {} ({})", file_->name(), shard_.tp_size,
         what, n_ff, align, dtype_name(down_type));
  }
  const int r = shard_.tp_rank, tp = shard_.tp_size;
  return {units * r / tp * align, units * (r + 1) / tp * align};
}

WeightView Model::expert_rows(const WeightView& stack, int64_t n_expert, int64_t rows, int64_t begin, int64_t end) {
  const int64_t row_bytes = quant::row_bytes(quant::require_format(stack.type), stack.cols);
  LargeBuffer& buffer = owned_matrices_.emplace_back(size_t(n_expert * (end - begin) * row_bytes));
  const auto* src = static_cast<const uint8_t*>(stack.data);
  for (int64_t e = 0; e < n_expert; ++e) {
    std::copy_n(src + (e * rows + begin) * row_bytes, (end - begin) * row_bytes,
                buffer.data() + e * (end - begin) * row_bytes);
  }
  return WeightView{stack.type, n_expert * (end - begin), stack.cols, buffer.data()};
}

int64_t Model::parameter_count() const {
  int64_t count = 0;
  for (const auto& t : file_->tensors()) {
    if (t.type != DType::I32) count += t.num_elements;  // I32 tensors are indices (input orders), not weights
  }
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
  spec.n_kv_head = local_kv_heads();
  spec.head_dim = config_.head_dim;
  spec.value_in_key = config_.mla.enabled();
  return spec;
}

int64_t Model::weight_bytes() const {
  int64_t bytes = 0;
  for (const auto& t : file_->tensors()) bytes += int64_t(t.num_bytes);
  return bytes + reencoding_extra_bytes_;
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
    case LinearKind::ExpertGate: return moe.gate_stack;
    case LinearKind::ExpertUp: return moe.up_stack;
    case LinearKind::ExpertDown: return moe.down_stack;
    case LinearKind::SharedGate: return moe.shared_gate;
    case LinearKind::SharedUp: return moe.shared_up;
    case LinearKind::SharedDown: return moe.shared_down;
    case LinearKind::SharedGateInp: return moe.shared_gate_inp;
    case LinearKind::AttnQA: return mla.q_a;
    case LinearKind::AttnQB: return mla.q_b;
    case LinearKind::AttnKvA: return mla.kv_a;
    case LinearKind::AttnKB: return mla.k_b;
    case LinearKind::AttnVB: return mla.v_b;
    default: break;
  }
  fail("internal: {} is not a dense, MoE or latent-attention layer's matrix", linear_tensor_name(0, kind));
}

WeightView* Model::replaceable_matrix(const std::string& name) {
  if (name == "token_embd.weight") return &weights_.token_embd;
  if (name == "output.weight" && !weights_.tied_output) return &weights_.output;
  // Layer matrices by the same names the forward pass reports: the dense ones, a MoE layer's
  // expert stacks (each [n_expert * rows][cols]) and shared expert, latent attention's matrices and
  // per-head stacks; those a layer does not have are empty views.
  static constexpr LinearKind kMoeAndLatentKinds[] = {
      LinearKind::ExpertGate, LinearKind::ExpertUp, LinearKind::ExpertDown, LinearKind::SharedGate,
      LinearKind::SharedUp,   LinearKind::SharedDown, LinearKind::SharedGateInp, LinearKind::AttnQA,
      LinearKind::AttnQB,     LinearKind::AttnKvA,  LinearKind::AttnKB,     LinearKind::AttnVB};
  for (size_t il = 0; il < weights_.layers.size(); ++il) {
    LayerWeights& layer = weights_.layers[il];
    for (LinearKind k : kLayerLinearKinds) {
      if (linear_tensor_name(int64_t(il), k) == name) return &layer.matrix(k);
    }
    for (LinearKind k : kMoeAndLatentKinds) {
      if (layer.matrix(k).data != nullptr && linear_tensor_name(int64_t(il), k) == name) return &layer.matrix(k);
    }
  }
  return nullptr;
}

std::string Model::input_ordered_matrix() const {
  for (size_t il = 0; il < weights_.layers.size(); ++il) {
    for (LinearKind k : kLayerLinearKinds) {
      if (weights_.layers[il].matrix(k).input_order != nullptr) return linear_tensor_name(int64_t(il), k);
    }
  }
  return weights_.output.input_order != nullptr ? "output.weight" : "";
}

void Model::release_pages(const WeightView& v) const {
  const quant::WeightFormat* format = quant::find_format(v.type);
  if (v.data == nullptr || v.rows == 0 || format == nullptr) return;
  file_->release_pages(v.data, size_t(v.rows * quant::row_bytes(*format, v.cols)));
}

bool Model::can_replace_matrix(const std::string& name) const {
  return const_cast<Model*>(this)->replaceable_matrix(name) != nullptr;
}

WeightView Model::replace_matrix(const std::string& name, const WeightView& w) {
  WeightView* target = replaceable_matrix(name);
  if (target == nullptr) fail("{}: no matrix '{}' to replace", file_->name(), name);
  if (w.rows != target->rows || w.cols != target->cols) {
    fail("{}: replacement for '{}' is {} x {}, the model's is {} x {}", file_->name(), name, w.rows,
         w.cols, target->rows, target->cols);
  }
  if (quant::find_format(w.type) == nullptr) fail("replacement for '{}': type {} has no kernels", name, dtype_name(w.type));
  if (w.input_order != target->input_order) {
    // Columns in another order would multiply the wrong inputs (act-order checkpoints).
    fail("{}: replacement for '{}' reads its input in a different column order (act-order matrices "
         "cannot be replaced one by one)", file_->name(), name);
  }
  const WeightView old = *target;
  *target = w;
  if (target == &weights_.token_embd && weights_.tied_output) weights_.output = w;
  return old;
}

}  // namespace kestrel
