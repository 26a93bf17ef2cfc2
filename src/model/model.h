// A loaded model: its GGUF file (memory-mapped), hyper-parameters, weight views and forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/activation_observer.h"
#include "loader/gguf_reader.h"
#include "model/forward_batch.h"
#include "model/model_config.h"

namespace kestrel {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  WeightView wq;                     // [n_head * head_dim][n_embd]
  WeightView wk;                     // [n_head_kv * head_dim][n_embd]
  WeightView wv;                     // [n_head_kv * head_dim][n_embd]
  const float* bq = nullptr;         // [n_head * head_dim]     (qkv_bias)
  const float* bk = nullptr;         // [n_head_kv * head_dim]  (qkv_bias)
  const float* bv = nullptr;         // [n_head_kv * head_dim]  (qkv_bias)
  const float* q_norm = nullptr;     // [head_dim]              (qk_norm)
  const float* k_norm = nullptr;     // [head_dim]              (qk_norm)
  WeightView wo;                     // [n_embd][n_head * head_dim]
  const float* post_attn_norm = nullptr;  // [n_embd]           (post_norms)
  const float* ffn_norm = nullptr;   // [n_embd]
  WeightView w_gate;                 // [n_ff][n_embd]
  WeightView w_up;                   // [n_ff][n_embd]
  WeightView w_down;                 // [n_embd][n_ff]
  const float* post_ffn_norm = nullptr;   // [n_embd]           (post_norms)

  // The linear matrix of `kind` (not LinearKind::Output, which is the model's).
  WeightView& matrix(LinearKind kind);
  const WeightView& matrix(LinearKind kind) const { return const_cast<LayerWeights*>(this)->matrix(kind); }
};

struct ModelWeights {
  WeightView token_embd;              // [n_vocab][n_embd]
  const float* output_norm = nullptr; // [n_embd]
  WeightView output;                  // [n_vocab][n_embd]; the embedding when tied
  bool tied_output = false;
  const float* rope_freq_factors = nullptr;  // [n_rot / 2] or null
  std::vector<LayerWeights> layers;
};

class Model {
 public:
  // Loads a GGUF model of any supported architecture (model_config.h); an unknown architecture or
  // a missing/mis-shaped tensor is a kestrel::Error naming the file and tensor. Shows a progress
  // bar on a terminal.
  static std::unique_ptr<Model> load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const gguf::GgufFile& file() const { return *file_; }
  int64_t parameter_count() const;
  int64_t weight_bytes() const;
  // How the layers split into KV-cache groups (full attention / sliding window). With a rolling
  // window (attention sinks, core/kv_spec.h), full-attention layers, and sliding layers whose own
  // window is no smaller, see that window and its sinks.
  KvLayout kv_layout(int64_t rolling_window = 0, int sink_tokens = 0) const;
  // The KV cache description of this model for the given types (n_kv_head and head_dim filled in).
  KvCacheSpec kv_spec(DType k_type = DType::F16, DType v_type = DType::F16, int block_size = 16) const;

  // Runs the batch; writes logits [batch.logits_indices.size()][n_vocab]. An observer, if given,
  // sees every linear layer's input (the output head's only for the logits rows).
  void forward(Backend& backend, const ForwardBatch& batch, const KvCacheView& kv,
               ForwardScratch& scratch, float* logits, ActivationObserver* observer = nullptr) const;
  // Points the named matrix at another encoding of it (same shape; `w.data` owned by the caller and
  // alive while the model runs) and returns the view it had: for measuring what quantizing one
  // tensor costs. Throws if the model has no such matrix.
  WeightView replace_matrix(const std::string& name, const WeightView& w);

 private:
  Model() = default;
  void load_weights();
  const float* vector_tensor(const std::string& name, int64_t length);
  WeightView matrix_tensor(const std::string& name, int64_t rows, int64_t cols);

  std::unique_ptr<gguf::GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;
  std::vector<std::vector<float>> owned_vectors_;  // 1-D tensors converted to F32
};

}  // namespace kestrel
