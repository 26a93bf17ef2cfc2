#include "model/mla_attention.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "model/tensor_views.h"

namespace kestrel {

MlaLayerWeights load_mla_layer(const gguf::GgufFile& file, const ModelConfig& c, int64_t layer,
                               std::vector<std::vector<float>>& owned_vectors, WeightView& q) {
  const MlaConfig& m = c.mla;
  const std::string p = fmt::format("blk.{}.", layer);
  const int64_t r = m.kv_lora_rank, q_rows = c.n_head * m.q_head_dim();
  MlaLayerWeights w;
  if (m.q_lora_rank > 0) {
    w.q_a = matrix_view(file, p + "attn_q_a.weight", m.q_lora_rank, c.n_embd, "query latent");
    w.q_a_norm = vector_view(file, p + "attn_q_a_norm.weight", m.q_lora_rank, "query latent norm", owned_vectors);
    w.q_b = matrix_view(file, p + "attn_q_b.weight", q_rows, m.q_lora_rank, "queries from the latent");
  } else {
    q = matrix_view(file, p + "attn_q.weight", q_rows, c.n_embd, "queries");
  }
  w.kv_a = matrix_view(file, p + "attn_kv_a_mqa.weight", r + m.rope_dim, c.n_embd, "key/value latent and rotary key");
  w.kv_a_norm = vector_view(file, p + "attn_kv_a_norm.weight", r, "key/value latent norm", owned_vectors);
  if (file.find_tensor(p + "attn_k_b.weight") == nullptr && file.find_tensor(p + "attn_kv_b.weight") != nullptr) {
    fail("{}: tensor '{}attn_kv_b.weight' is the layout of GGUFs converted before llama.cpp split it into attn_k_b "
         "and attn_v_b; convert the model again with a current convert_hf_to_gguf.py", file.name(), p);
  }
  const std::string heads_key = c.architecture + ".attention.head_count";
  w.k_b = stack_view(file, p + "attn_k_b.weight", c.n_head, r, m.nope_dim, heads_key, "heads");
  w.v_b = stack_view(file, p + "attn_v_b.weight", c.n_head, m.v_dim, r, heads_key, "heads");
  w.n_head = c.n_head;
  return w;
}

namespace {

// The per-head buffers, sized for both uses: absorbing q_nope ([H][T][nope] -> [H][T][r]) and
// expanding the attended latents ([H][T][r] -> [H][T][v_dim]).
void size_head_buffers(const ModelConfig& c, int64_t n_head, int64_t T, MlaScratch& s) {
  const MlaConfig& m = c.mla;
  s.heads_in.resize(size_t(n_head * T * std::max(m.nope_dim, m.kv_lora_rank)));
  s.heads_out.resize(size_t(n_head * T * std::max(m.kv_lora_rank, m.v_dim)));
}

}  // namespace

int64_t mla_scratch_floats_per_token(const ModelConfig& c) {
  const MlaConfig& m = c.mla;
  if (!m.enabled()) return 0;
  return c.n_head * (m.q_head_dim() + std::max(m.nope_dim, m.kv_lora_rank) + std::max(m.kv_lora_rank, m.v_dim) +
                     m.rope_dim + m.v_dim) +
         m.q_lora_rank;
}

void mla_queries_and_keys(Backend& backend, const ModelConfig& c, const MlaLayerWeights& w, const WeightView& wq,
                          const float* x,
                          int64_t T, const int32_t* positions, const RopeParams& rope, MlaScratch& s, float* query,
                          float* key, LayerObserver seen) {
  const MlaConfig& m = c.mla;
  const int64_t H = w.n_head, r = m.kv_lora_rank, nope = m.nope_dim, d = m.rope_dim, qd = m.q_head_dim();
  const int64_t key_dim = r + d;
  // Queries [T][H][nope + rope].
  s.q.resize(size_t(T * H * qd));
  if (m.q_lora_rank > 0) {
    s.q_latent.resize(size_t(T * m.q_lora_rank));
    seen.observe(LinearKind::AttnQA, x, T, c.n_embd);
    backend.matmul(w.q_a, x, T, s.q_latent.data());
    backend.rms_norm(s.q_latent.data(), w.q_a_norm, T, m.q_lora_rank, c.rms_eps, s.q_latent.data());
    seen.observe(LinearKind::AttnQB, s.q_latent.data(), T, m.q_lora_rank);
    backend.matmul(w.q_b, s.q_latent.data(), T, s.q.data());
  } else {
    seen.observe(LinearKind::AttnQ, x, T, c.n_embd);
    backend.matmul(wq, x, T, s.q.data());
  }
  // Latent and rotary key [T][r + rope], straight into `key`; the latent normed in place.
  seen.observe(LinearKind::AttnKvA, x, T, c.n_embd);
  backend.matmul(w.kv_a, x, T, key);
  for (int64_t t = 0; t < T; ++t) {
    float* row = key + t * key_dim;
    backend.rms_norm(row, w.kv_a_norm, 1, r, c.rms_eps, row);
  }
  // q_nope absorbed per head: [H][T][nope] -> W_kb[h] -> [H][T][r], one grouped call.
  size_head_buffers(c, H, T, s);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(s.q.data() + (t * H + h) * qd, nope, s.heads_in.data() + (h * T + t) * nope);
    }
  }
  // An observer sees every head's input before the stack is read (it may replace the stack).
  if (seen.observer) {
    for (int64_t h = 0; h < H; ++h) {
      seen.observe_stacked(LinearKind::AttnKB, h, H, s.heads_in.data() + h * T * nope, T, nope);
    }
    seen.end_stacked(LinearKind::AttnKB, H);
  }
  s.groups.clear();
  for (int64_t h = 0; h < H; ++h) {
    s.groups.push_back({stacked_matrix(w.k_b, h, r), s.heads_in.data() + h * T * nope, T,
                        s.heads_out.data() + h * T * r});
  }
  backend.matmul_grouped(s.groups);
  // The rotary parts of the queries [T][H][rope] and keys [T][1][rope], rotated.
  s.pe.resize(size_t(T * H * d));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(s.q.data() + (t * H + h) * qd + nope, d, s.pe.data() + (t * H + h) * d);
    }
  }
  backend.rope(s.pe.data(), positions, T, int(H), int(d), rope);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      float* out = query + (t * H + h) * key_dim;
      std::copy_n(s.heads_out.data() + (h * T + t) * r, r, out);
      std::copy_n(s.pe.data() + (t * H + h) * d, d, out + r);
    }
  }
  s.pe.resize(size_t(T * d));
  for (int64_t t = 0; t < T; ++t) std::copy_n(key + t * key_dim + r, d, s.pe.data() + t * d);
  backend.rope(s.pe.data(), positions, T, 1, int(d), rope);
  for (int64_t t = 0; t < T; ++t) std::copy_n(s.pe.data() + t * d, d, key + t * key_dim + r);
}

void mla_values(Backend& backend, const ModelConfig& c, const MlaLayerWeights& w, const float* attn, int64_t T,
                MlaScratch& s, float* values, LayerObserver seen) {
  const MlaConfig& m = c.mla;
  const int64_t H = w.n_head, r = m.kv_lora_rank, key_dim = r + m.rope_dim, v = m.v_dim;
  size_head_buffers(c, H, T, s);
  // [T][H][r + rope] -> the latent part per head [H][T][r] -> W_vb[h] -> [H][T][v] -> [T][H * v].
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(attn + (t * H + h) * key_dim, r, s.heads_in.data() + (h * T + t) * r);
    }
  }
  if (seen.observer) {
    for (int64_t h = 0; h < H; ++h) seen.observe_stacked(LinearKind::AttnVB, h, H, s.heads_in.data() + h * T * r, T, r);
    seen.end_stacked(LinearKind::AttnVB, H);
  }
  s.groups.clear();
  for (int64_t h = 0; h < H; ++h) {
    s.groups.push_back({stacked_matrix(w.v_b, h, v), s.heads_in.data() + h * T * r, T, s.heads_out.data() + h * T * v});
  }
  backend.matmul_grouped(s.groups);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(s.heads_out.data() + (h * T + t) * v, v, values + t * H * v + h * v);
    }
  }
}

}  // namespace kestrel
