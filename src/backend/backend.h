// The compute backend: every numeric kernel the model's forward pass needs, behind one interface,
// so a CUDA backend can join later without touching model code. Pointers are memory the backend
// can address (host memory for the CPU backend). Activations are F32, row-major [tokens, width].
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"

namespace kestrel {

// A 2-D weight matrix W[rows][cols] in any supported format, rows stored one after another.
// A linear layer computes y[t][r] = sum_c W[r][c] * x[t][c].
struct WeightView {
  DType type = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  // Null, or [cols]: column c of W multiplies x[t][input_order[c]] (a permutation). GPTQ's
  // act-order checkpoints store columns sorted by group; this reads the input in that order
  // instead of reordering the weights' groups.
  const int32_t* input_order = nullptr;
};

struct RopeParams {
  int n_rot = 0;               // rotated dimensions per head (<= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;     // linear position scaling (1 / factor)
  bool neox = false;           // NeoX order pairs (i, i + n_rot/2); normal order pairs (2i, 2i+1)
  const float* freq_factors = nullptr;  // [n_rot / 2] divisors of each frequency (Llama 3, LongRoPE), or null
  // Multiplies cos and sin, so the rotated dimensions of q and k (LongRoPE's magnitude correction
  // sqrt(1 + ln(s) / ln(original context)) for a context s times the original; llama.cpp's
  // rope.scaling.attn_factor). Re-rotations (attention sinks) leave it out.
  float attn_factor = 1.0f;
};

// K/V storage of one layer in the paged cache (core/kv_spec.h): K and V each
// [n_kv_head][num_slots] rows (num_slots = num_blocks * block_size), a row being one head of one
// token in its type's row layout (scales inside the row). One head's rows of a block are
// contiguous, and so are those of consecutive blocks, so attention streams a sequence's keys of
// one head as long runs of memory. slot = block_id * block_size + offset_in_block. With latent
// attention (KvCacheSpec::value_in_key) v is k: V's rows are K's.
struct KvLayerView {
  DType k_type = DType::F32;
  DType v_type = DType::F32;
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  int64_t num_slots = 0;    // rows per head: the pool's blocks x block size
  int n_kv_head = 0;
  int64_t k_row_bytes = 0;  // one head of one token
  int64_t v_row_bytes = 0;

  uint8_t* k_row(int64_t slot, int head) const { return k + (head * num_slots + slot) * k_row_bytes; }
  uint8_t* v_row(int64_t slot, int head) const { return v + (head * num_slots + slot) * v_row_bytes; }
};

// Attention metadata for a flattened batch: token t belongs to sequence token_seq[t], sits at
// position positions[t] and attends causally to the positions visible from it in its sequence,
// whose K/V live in the blocks listed in block_tables[seq * max_blocks_per_seq ...]. Visible from
// position p:
//   window == 0:            [0, p]
//   window > 0, sinks == 0: [max(0, p - window + 1), p]             (sliding window)
//   window > 0, sinks > 0:  [0, sinks) and [max(sinks, p - (window - sinks) + 1), p]
// With sinks (StreamingLLM), the sink keys are scored as if they sat just before the oldest recent
// key: their RoPE position is moved up by delta = max(0, p - window + 1), the gap the window left,
// by rotating the query back by delta (q . R(delta) k = R(-delta) q . k), so no stored key is ever
// rotated again. That needs the layer's RoPE (sink_rope), and whether Q and K were Hadamard-
// rotated after RoPE (rotated: the query is un-rotated, RoPE'd and rotated again).
struct PagedAttentionArgs {
  int64_t num_tokens = 0;
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* token_seq = nullptr;     // [num_tokens]
  const int32_t* block_tables = nullptr;  // [num_seqs][max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  int block_size = 16;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  float scale = 1.0f;                     // usually 1/sqrt(head_dim)
  float softcap = 0.0f;                   // > 0: scores = softcap * tanh(scores / softcap) (Gemma 2)
  int window = 0;                         // tokens visible in all; 0 = full causal attention
  int sinks = 0;                          // attention sinks (only with window > 0)
  const RopeParams* sink_rope = nullptr;  // the layer's RoPE (needed when sinks > 0)
  bool rotated = false;                   // Q and K were Hadamard-rotated per head
};

// The activation of a gated MLP: act(x W_gate) * (x W_up).
enum class GatedActivation { Silu, GeluTanh };

// One product of a grouped call (Backend::matmul_grouped): y[n][w.rows] = x[n][w.cols] . w^T.
struct MatmulGroup {
  WeightView w;
  const float* x = nullptr;
  int64_t n = 0;
  float* y = nullptr;
};

// One gated MLP input half of a grouped call (Backend::gated_ffn_grouped):
// out[n][gate.rows] = act(x . gate^T) * (x . up^T).
struct GatedFfnGroup {
  WeightView gate, up;
  const float* x = nullptr;
  int64_t n = 0;
  float* out = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // y[n][w.rows] = x[n][w.cols] . W^T
  virtual void matmul(const WeightView& w, const float* x, int64_t n, float* y) = 0;
  // Several linear layers reading the same input (attention's Q, K and V): ys[i][n][ws[i].rows] =
  // x[n][cols] . ws[i]^T, each equal to matmul(ws[i], x, n, ys[i]). One call lets the backend
  // convert x once for every matrix that reads it in the same layout and run them all in one
  // parallel region.
  virtual void matmul_many(std::span<const WeightView> ws, const float* x, int64_t n,
                           std::span<float* const> ys) = 0;
  // A gated MLP's input half: out[n][gate.rows] = act(x . gate^T) * (x . up^T), as matmul, matmul
  // and silu_mul/gelu_mul would give, with the activation applied while the rows are in cache.
  virtual void gated_ffn(const WeightView& gate, const WeightView& up, GatedActivation act,
                         const float* x, int64_t n, float* out) = 0;
  // Independent products, each over its own input (a Mixture-of-Experts layer's experts, each over
  // the tokens routed to it), each result equal to matmul / gated_ffn of that group alone. One call
  // lets the backend run every group in one parallel region. The default runs them one by one.
  virtual void matmul_grouped(std::span<const MatmulGroup> groups) {
    for (const MatmulGroup& g : groups) matmul(g.w, g.x, g.n, g.y);
  }
  virtual void gated_ffn_grouped(std::span<const GatedFfnGroup> groups, GatedActivation act) {
    for (const GatedFfnGroup& g : groups) gated_ffn(g.gate, g.up, act, g.x, g.n, g.out);
  }
  // out[i][:] = table row ids[i], dequantized to F32. table is [vocab][width].
  virtual void get_rows(const WeightView& table, const int32_t* ids, int64_t n, float* out) = 0;
  // out[i] = x[i] / rms(x[i]) * weight, rows of `width`.
  virtual void rms_norm(const float* x, const float* weight, int64_t n, int64_t width, float eps,
                        float* out) = 0;
  // The residual add and the next RMSNorm in one pass: x += y; out = rms_norm(x) * weight.
  virtual void add_rms_norm(float* x, const float* y, const float* weight, int64_t n, int64_t width,
                            float eps, float* out) = 0;
  // out[i] = (x[i] - mean(x[i])) / sqrt(var(x[i]) + eps) * weight + bias, rows of `width`; bias
  // may be null (none).
  virtual void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t width,
                          float eps, float* out) = 0;
  // The residual add and the next LayerNorm in one pass: x += y; out = layer_norm(x).
  virtual void add_layer_norm(float* x, const float* y, const float* weight, const float* bias, int64_t n,
                              int64_t width, float eps, float* out) = 0;
  // Rotates each head of x[n][n_heads * head_dim] in place by its token's position.
  virtual void rope(float* x, const int32_t* positions, int64_t n, int n_heads, int head_dim,
                    const RopeParams& params) = 0;
  // out = silu(gate) * up, elementwise over count values.
  virtual void silu_mul(const float* gate, const float* up, int64_t count, float* out) = 0;
  // out = gelu_tanh(gate) * up (Gemma's gated MLP).
  virtual void gelu_mul(const float* gate, const float* up, int64_t count, float* out) = 0;
  // x = act(x), elementwise (a plain, ungated MLP's activation).
  virtual void activate(GatedActivation act, float* x, int64_t count) = 0;
  // x += y, elementwise.
  virtual void add(float* x, const float* y, int64_t count) = 0;
  // x[t][j] += row[j] for each of n rows of `width` (a bias).
  virtual void add_row(float* x, const float* row, int64_t n, int64_t width) = 0;
  // x *= s, elementwise.
  virtual void scale(float* x, float s, int64_t count) = 0;
  // x = cap * tanh(x / cap) (logit soft-capping).
  virtual void softcap(float* x, float cap, int64_t count) = 0;
  // Stores k[t], v[t] ([n][n_kv_head * head_dim] each) at slot_mapping[t] of the layer's cache,
  // each head quantized to the cache's K / V type (slot -1: a padding token, nothing written).
  virtual void kv_write(const KvLayerView& cache, const float* k, const float* v,
                        const int64_t* slot_mapping, int64_t n, int n_kv_head, int head_dim) = 0;
  // x[r] = H x[r] for each of `rows` rows of head_dim values: the orthonormal Walsh-Hadamard
  // transform (head_dim a power of two), its own inverse.
  virtual void hadamard(float* x, int64_t rows, int head_dim) = 0;
  // out[t][n_head * head_dim] = softmax(q k^T * scale) v over each token's visible positions,
  // reading K and V in the cache's types.
  virtual void paged_attention(const PagedAttentionArgs& args, const float* q,
                               const KvLayerView& cache, float* out) = 0;
};

// The CPU backend with `num_threads` threads (the calling thread included).
std::unique_ptr<Backend> make_cpu_backend(int num_threads);
// The type the CPU backend's kernels (the table KESTREL_ISA or CPUID picks, one per process)
// would rather compute a stored weight type in, where an exact re-encoding of it is faster
// (core/dtype.h's compute encodings: IQ3_S as IQ3_S_L4 on AVX2), else `stored` itself; always
// `stored` with KESTREL_REPACK=0 in the environment. The model re-encodes its matrices by it at
// load (Model::load).
DType cpu_compute_encoding(DType stored);

}  // namespace kestrel
