// Multi-head latent attention (DeepSeek-V2) in the absorbed form llama.cpp runs (MlaConfig in
// model_config.h). Per token t and head h, with r = kv_lora_rank, d = rope_dim:
//   q_t = h_t W_q (or W_qb RMSNorm(h_t W_qa))       [n_head][nope_dim + rope_dim]
//   [c_t | p_t] = h_t W_kva                          [r + d]: the latent and the rotary key
//   key_t = [RMSNorm(c_t) | RoPE(p_t)]               [r + d]: one KV head, also the value
//   query_th = [W_kb[h] q_nope_th | RoPE(q_pe_th)]   [r + d]: q_nope absorbed into the latent
// so that query_th . key_s = q_nope_th . k_nope_sh + q_pe_th . p_s, with k_nope_sh = W_kb[h]^T
// c_s as the decompressed model computes it. Attention over the cache gives a_th [r + d] whose
// first r values are the attention-weighted latents; the head's value is W_vb[h] a_th[:r]
// [v_dim], and the heads' values [n_head * v_dim] go to attn_output.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/activation_observer.h"
#include "model/model_config.h"

namespace kestrel::gguf {
class GgufFile;
}

namespace kestrel {

// The layer's attn_q (q_lora_rank 0) is LayerWeights::wq, where the per-tensor tools can swap it.
struct MlaLayerWeights {
  WeightView q_a;                  // [q_lora_rank][n_embd]              attn_q_a (q_lora_rank > 0)
  const float* q_a_norm = nullptr; // [q_lora_rank]                      attn_q_a_norm
  WeightView q_b;                  // [n_head * (nope + rope)][q_lora_rank]  attn_q_b
  WeightView kv_a;                 // [kv_lora_rank + rope][n_embd]     attn_kv_a_mqa
  const float* kv_a_norm = nullptr;  // [kv_lora_rank]                  attn_kv_a_norm
  // Per head stacks (GGUF [nope, r, n_head] and [r, v_dim, n_head]): head h's matrices are rows
  // [h * r, (h + 1) * r) of k_b (W_kb[h], [r][nope]: q_nope -> latent) and rows
  // [h * v_dim, (h + 1) * v_dim) of v_b (W_vb[h], [v_dim][r]: latent -> value).
  WeightView k_b;                  // [n_head * r][nope]                 attn_k_b
  WeightView v_b;                  // [n_head * v_dim][r]                attn_v_b
  // The heads this rank computes: the model's n_head, or under --tp its slice, whose rows of
  // attn_q / attn_q_b, k_b and v_b the views above then hold (the latent, kv_a, is every rank's).
  int64_t n_head = 0;

  bool enabled() const { return kv_a.data != nullptr; }
};

// Layer `layer`'s latent-attention tensors, checked against the config (a missing tensor or one of
// another shape is a kestrel::Error naming it). A file from before llama.cpp split attn_kv_b into
// attn_k_b / attn_v_b is refused with the advice to convert it again.
// `q` receives attn_q when q_lora_rank is 0.
MlaLayerWeights load_mla_layer(const gguf::GgufFile& file, const ModelConfig& c, int64_t layer,
                               std::vector<std::vector<float>>& owned_vectors, WeightView& q);

// Buffers reused across layers and steps (n_head: the layer weights' heads).
struct MlaScratch {
  std::vector<float> q;         // [T][n_head][nope + rope]
  std::vector<float> q_latent;  // [T][q_lora_rank]
  std::vector<float> heads_in;  // [n_head][T][max(nope, r)]  one head's rows gathered contiguous
  std::vector<float> heads_out; // [n_head][T][max(r, v_dim)]
  std::vector<float> pe;        // [T][n_head][rope]
  std::vector<MatmulGroup> groups;
};

// Floats per batched token of MlaScratch plus the heads' values (the engine's memory plan); 0
// without latent attention.
int64_t mla_scratch_floats_per_token(const ModelConfig& c);

// From the layer's normed input x [T][n_embd]: the absorbed queries `query` [T][n_head][r + rope]
// and the latent keys `key` [T][r + rope] (the cache's one KV head; also its value). `wq` is
// attn_q (unused when q_lora_rank > 0). `seen` is shown each matrix's input (attn_k_b's head by
// head: that head's q_nope [T][nope]).
void mla_queries_and_keys(Backend& backend, const ModelConfig& c, const MlaLayerWeights& w, const WeightView& wq,
                          const float* x,
                          int64_t T, const int32_t* positions, const RopeParams& rope, MlaScratch& s, float* query,
                          float* key, LayerObserver seen = {});

// From attention's output `attn` [T][n_head][r + rope]: the heads' values `values` [T][n_head * v_dim].
// `seen` is shown attn_v_b's input head by head (that head's attended latent [T][r]).
void mla_values(Backend& backend, const ModelConfig& c, const MlaLayerWeights& w, const float* attn, int64_t T,
                MlaScratch& s, float* values, LayerObserver seen = {});

}  // namespace kestrel
