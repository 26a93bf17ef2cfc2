// A loaded model: its GGUF file (memory-mapped), hyper-parameters, weight views and forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/large_buffer.h"
#include "dist/communicator.h"
#include "model/activation_observer.h"
#include "loader/gguf_reader.h"
#include "model/forward_batch.h"
#include "model/model_config.h"
#include "model/model_shard.h"
#include "model/mla_attention.h"
#include "model/moe_weights.h"
#include "model/weight_memory.h"

namespace kestrel {

struct LayerWeights {
  // Norm weights and biases follow ModelConfig::norm; a null bias is none. A null input norm
  // (OLMo 2) means the block reads the residual stream as is.
  const float* attn_norm = nullptr;  // [n_embd]
  const float* attn_norm_b = nullptr;  // [n_embd]
  WeightView wq;                     // [n_head * head_dim][n_embd]  (a row range of attn_qkv when fused)
  WeightView wk;                     // [n_head_kv * head_dim][n_embd]
  WeightView wv;                     // [n_head_kv * head_dim][n_embd]
  const float* bq = nullptr;         // [n_head * head_dim]
  const float* bk = nullptr;         // [n_head_kv * head_dim]
  const float* bv = nullptr;         // [n_head_kv * head_dim]
  const float* q_norm = nullptr;     // QkNorm: PerHead [head_dim], PerHeadEach [n_head][head_dim], Full [n_head * head_dim]
  const float* k_norm = nullptr;     // the same with n_head_kv
  WeightView wo;                     // [n_embd][attn_out_width()]
  const float* bo = nullptr;         // [n_embd]
  const float* post_attn_norm = nullptr;  // [n_embd]           (post_norms)
  const float* ffn_norm = nullptr;   // [n_embd]; null when parallel_block or !input_norms
  const float* ffn_norm_b = nullptr;   // [n_embd]
  WeightView w_gate;                 // [n_ff][n_embd] (gated_ffn; rows [0, n_ff) of a fused gate+up)
  WeightView w_up;                   // [n_ff][n_embd]
  WeightView w_down;                 // [n_embd][n_ff]
  const float* b_gate = nullptr;     // [n_ff]
  const float* b_up = nullptr;       // [n_ff]
  const float* b_down = nullptr;     // [n_embd]
  const float* post_ffn_norm = nullptr;   // [n_embd]           (post_norms)
  MoeLayerWeights moe;               // a MoE layer's router and experts (then w_gate/up/down are empty)
  MlaLayerWeights mla;               // latent attention's tensors (then wq is attn_q if any; wk, wv empty)

  // The dense layer matrix of `kind` (AttnQ .. FfnDown; not Output, which is the model's).
  WeightView& matrix(LinearKind kind);
  const WeightView& matrix(LinearKind kind) const { return const_cast<LayerWeights*>(this)->matrix(kind); }
};

// f(view) for every matrix view of a layer (LayerWeights or const LayerWeights): the dense seven,
// latent attention's, a MoE layer's router, expert stacks and shared expert. Views a layer does not
// have are empty (null data).
template <class Layer, class F>
void for_each_layer_matrix(Layer& l, F&& f) {
  for (auto* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) f(*v);
  for (auto* v : {&l.mla.q_a, &l.mla.q_b, &l.mla.kv_a, &l.mla.k_b, &l.mla.v_b}) f(*v);
  for (auto* v : {&l.moe.router, &l.moe.gate_stack, &l.moe.up_stack, &l.moe.down_stack, &l.moe.shared_gate,
                  &l.moe.shared_up, &l.moe.shared_down}) {
    f(*v);
  }
}

struct ModelWeights {
  WeightView token_embd;              // [n_vocab][n_embd]
  const float* output_norm = nullptr; // [n_embd]
  const float* output_norm_b = nullptr;  // [n_embd] (LayerNorm models)
  WeightView output;                  // [n_vocab][n_embd]; the embedding when tied
  bool tied_output = false;
  const float* rope_freq_factors = nullptr;  // [n_rot / 2] or null
  const float* rope_factors_long = nullptr;   // [n_rot / 2] LongRoPE, both or neither; rope_freqs wins
  const float* rope_factors_short = nullptr;
  // The frequency divisors for a cache serving sequences of up to context_length positions (0:
  // the model's training context), or null.
  const float* rope_factors_for(int64_t context_length, const ModelConfig& c) const {
    if (!c.rope_yarn_divisors.empty()) return c.rope_yarn_divisors.data();  // the loader refuses YaRN + factors
    if (rope_freq_factors != nullptr || rope_factors_long == nullptr) return rope_freq_factors;
    const int64_t context = context_length > 0 ? context_length : c.n_ctx_train;
    return c.rope_orig_ctx > 0 && context > c.rope_orig_ctx ? rope_factors_long : rope_factors_short;
  }
  std::vector<LayerWeights> layers;
};

// Columns [begin, end) of every row of `w` in a buffer of their own (appended to `owned`): whole
// blocks copied when the cut falls on block boundaries, else the slice dequantized to F32. A
// row-parallel shard (attn_output, ffn_down) of a quantized matrix.
WeightView slice_columns(const WeightView& w, int64_t begin, int64_t end, std::vector<LargeBuffer>& owned);

struct ModelLoadOptions {
  // Re-encode matrices for the CPU kernels (false: tests comparing the stored type's kernels).
  bool compute_encodings = true;
  // Touch every weight page at load (a progress bar for large files; no page faults in the first
  // pass). A calibration that reads the model one layer at a time and drops each layer's pages
  // after it skips this, so the whole file is never resident at once.
  bool prefault = true;
  WeightMemory weights = WeightMemory::Auto;
};

// Layers [begin, end) of a model; -1: the stage's first / end.
struct LayerRange {
  int64_t begin = -1, end = -1;
};

class Model {
 public:
  // Loads a GGUF model of any supported architecture (model_config.h); an unknown architecture or
  // a missing/mis-shaped tensor is a kestrel::Error naming the file and tensor. Shows a progress
  // bar on a terminal. With a shard request, only this rank's layers and slices (model_shard.h)
  // are viewed and paged in: row slices in place in the mapping, row-parallel column slices
  // repacked into memory of their own (whole blocks copied; a slice that would cut a block is
  // dequantized to F32).
  // Matrices whose type the CPU kernels compute faster in an exact re-encoding are re-encoded into
  // memory of the model's own (model/compute_encodings.h), and every weight page is touched,
  // unless `options` says otherwise. The file is read into memory or mapped as options.weights
  // says; asked to read a file larger than the available memory, it fails with a clear error.
  static std::unique_ptr<Model> load(const std::string& path, const ShardRequest& shard = {},
                                     const ModelLoadOptions& options = {});

  // The whole model's hyper-parameters (not the shard's).
  const ModelConfig& config() const { return config_; }
  const ModelShard& shard() const { return shard_; }
  // Heads, KV heads and FFN channels this rank computes (the whole model's without a split).
  int64_t local_heads() const { return shard_.mine().n_head(); }
  int64_t local_kv_heads() const { return shard_.mine().n_head_kv(); }
  int64_t local_ff() const { return shard_.mine().n_ff(); }
  const ModelWeights& weights() const { return weights_; }
  const gguf::GgufFile& file() const { return *file_; }
  int64_t parameter_count() const;
  // The tensors' bytes in the file, plus what re-encoding matrices for compute added.
  int64_t weight_bytes() const;
  // Whether the file was read into memory (WeightMemory::InMemory) rather than mapped: its bytes
  // are then already out of the memory the kernel reports available.
  bool weights_in_memory() const { return weights_in_memory_; }
  // How the layers split into KV-cache groups (full attention / sliding window). With a rolling
  // window (attention sinks, core/kv_spec.h), full-attention layers, and sliding layers whose own
  // window is no smaller, see that window and its sinks.
  KvLayout kv_layout(int64_t rolling_window = 0, int sink_tokens = 0) const;
  // The KV cache description of this model for the given types (n_kv_head and head_dim filled in;
  // the KV heads this rank holds).
  KvCacheSpec kv_spec(DType k_type = DType::F16, DType v_type = DType::F16, int block_size = 16) const;

  // Runs the batch; writes logits [batch.logits_indices.size()][n_vocab]. An observer, if given,
  // sees every linear layer's input (the output head's only for the logits rows). One process only.
  void forward(Backend& backend, const ForwardBatch& batch, const KvCacheView& kv,
               ForwardScratch& scratch, float* logits, ActivationObserver* observer = nullptr) const;

  // The forward pass in the parts a pipeline stage runs, over this rank's shard; `tp` is its
  // tensor-parallel group (every rank of it calls the same parts with the same batch).
  // embed: the first stage's input, scratch.hidden = embeddings [T][n_embd].
  void embed(Backend& backend, const ForwardBatch& batch, ForwardScratch& scratch, Communicator& tp) const;
  // The stage's layers over scratch.hidden [T][n_embd], in place: all of them, or `layers` (a
  // calibration runs the model layer by layer: the output is then the residual stream after the
  // range's last layer, not yet normalized for the next).
  void run_layers(Backend& backend, const ForwardBatch& batch, const KvCacheView& kv, ForwardScratch& scratch,
                  Communicator& tp, ActivationObserver* observer = nullptr, LayerRange layers = {}) const;
  // The last stage's head: logits [logits rows][n_vocab] onto tensor-parallel rank 0 (`logits` is
  // not written on the others).
  void head(Backend& backend, const ForwardBatch& batch, ForwardScratch& scratch, float* logits,
            Communicator& tp, ActivationObserver* observer = nullptr) const;
  // Points the named matrix at another encoding of it (same shape; `w.data` owned by the caller and
  // alive while the model runs) and returns the view it had: for measuring what quantizing one
  // tensor costs. Throws if the model has no such matrix.
  WeightView replace_matrix(const std::string& name, const WeightView& w);
  // Whether replace_matrix knows the name (the embedding, an untied head, the layers' seven linear
  // matrices; not fused or expert tensors).
  bool can_replace_matrix(const std::string& name) const;
  // Drops the file's pages of matrix `v` (a calibration done with a layer's weights; they are read
  // back from the file if touched again); a view outside the file's mapping (an encoding in memory)
  // is left alone.
  void release_pages(const WeightView& v) const;
  // The first matrix that reads its input in its own column order (an act-order checkpoint's
  // input_order), or "" if none: calibration, which observes inputs in the model's order, refuses it.
  std::string input_ordered_matrix() const;

 private:
  WeightView* replaceable_matrix(const std::string& name);
  Model() = default;
  void read_vocab_size();  // n_vocab from token_embd, checked against the tokenizer's
  void load_weights();
  void load_layer(int64_t il);
  void load_attention(int64_t il);            // q/k/v (fused or not), their biases and norms
  void load_mla_layer_attention(int64_t il);  // latent attention's tensors
  void load_dense_mlp(int64_t il);            // gate/up/down (fused or not) and biases
  void split_moe_layer(MoeLayerWeights& m);   // this tensor-parallel rank's part of a MoE layer
  // This rank's FFN channels [begin, end) of n_ff, cut at whole blocks of `down_type`.
  std::pair<int64_t, int64_t> channel_slice(int64_t n_ff, DType down_type, const char* what) const;
  // Rows [begin, end) of each of a stack's n_expert matrices of `rows` rows, repacked as a stack.
  WeightView expert_rows(const WeightView& stack, int64_t n_expert, int64_t rows, int64_t begin, int64_t end);
  // Rows [begin, end) of `w`, in place; columns [begin, end) of every row, repacked.
  static WeightView rows_of(const WeightView& w, int64_t begin, int64_t end);
  WeightView columns_of(const WeightView& w, int64_t begin, int64_t end);
  // A 1-D tensor of `length` values in F32 (`flatten`: any shape of that many elements).
  const float* vector_tensor(const std::string& name, int64_t length, bool flatten = false);
  // The tensor if the file has it, else null.
  const float* optional_vector(const std::string& name, int64_t length);
  WeightView matrix_tensor(const std::string& name, int64_t rows, int64_t cols);
  const int32_t* input_order(const std::string& matrix_name, int64_t cols);

  std::unique_ptr<gguf::GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;
  ModelShard shard_;
  std::vector<std::vector<float>> owned_vectors_;  // 1-D tensors converted to F32
  std::vector<LargeBuffer> owned_matrices_;         // repacked column slices, compute encodings
  int64_t reencoding_extra_bytes_ = 0;              // the compute encodings' size over the stored types'
  bool weights_in_memory_ = false;
};

}  // namespace kestrel
