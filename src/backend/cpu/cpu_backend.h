// The CPU backend: plain reference kernels, multi-threaded across output rows / heads with a
// persistent thread pool. The fast-kernels work replaces the inner loops, not this structure.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int num_threads);

  void matmul(const WeightView& w, const float* x, int64_t n, float* y) override;
  void matmul_many(std::span<const WeightView> ws, const float* x, int64_t n,
                   std::span<float* const> ys) override;
  void gated_ffn(const WeightView& gate, const WeightView& up, GatedActivation act, const float* x,
                 int64_t n, float* out) override;
  void matmul_grouped(std::span<const MatmulGroup> groups) override;
  void gated_ffn_grouped(std::span<const GatedFfnGroup> groups, GatedActivation act) override;
  void get_rows(const WeightView& table, const int32_t* ids, int64_t n, float* out) override;
  void rms_norm(const float* x, const float* weight, int64_t n, int64_t width, float eps,
                float* out) override;
  void add_rms_norm(float* x, const float* y, const float* weight, int64_t n, int64_t width,
                    float eps, float* out) override;
  void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t width, float eps,
                  float* out) override;
  void add_layer_norm(float* x, const float* y, const float* weight, const float* bias, int64_t n,
                      int64_t width, float eps, float* out) override;
  void rope(float* x, const int32_t* positions, int64_t n, int n_heads, int head_dim,
            const RopeParams& params) override;
  void activate(GatedActivation act, float* x, int64_t count) override;
  void silu_mul(const float* gate, const float* up, int64_t count, float* out) override;
  void gelu_mul(const float* gate, const float* up, int64_t count, float* out) override;
  void add(float* x, const float* y, int64_t count) override;
  void add_row(float* x, const float* row, int64_t n, int64_t width) override;
  void scale(float* x, float s, int64_t count) override;
  void softcap(float* x, float cap, int64_t count) override;
  void kv_write(const KvLayerView& cache, const float* k, const float* v,
                const int64_t* slot_mapping, int64_t n, int n_kv_head, int head_dim) override;
  void hadamard(float* x, int64_t rows, int head_dim) override;
  void paged_attention(const PagedAttentionArgs& args, const float* q, const KvLayerView& cache,
                       float* out) override;

 private:
  // One weight matrix ready for the tile kernel, with its input converted.
  struct PreparedMatmul {
    const cpu::FormatKernels* kernels = nullptr;
    const uint8_t* weights = nullptr;
    int64_t weight_row_bytes = 0;
    int64_t rows = 0;
    int64_t cols = 0;
    const uint8_t* activations = nullptr;
    int64_t act_row_bytes = 0;
    const int32_t* input_order = nullptr;  // the weight's (activations were gathered by it)
  };
  static constexpr int kMaxMatmuls = 4;  // matrices in one matmul_many / gated_ffn call
  static constexpr int64_t kRowGrain = 16;  // a call with no more rows runs on the calling thread
  // Row chunks are multiples of this: whole register tiles of every kernel (rows of 2, 3, 4, 8).
  static constexpr int64_t kChunkAlign = 48;
  // Chunks per thread a matrix is cut into (see chunk_rows) for batches (compute-bound); for one
  // token the format's kernels say (FormatKernels::decode_chunks_per_thread: 1 where decode is bound
  // by memory, one contiguous range per thread streaming best; Gemma 3 270M decode ran ~2-8%
  // slower with 8 chunks per thread, in alternating runs).
  static constexpr int64_t kChunksPerThread = 8;
  // Checks w, finds its kernels and converts x[n][w.cols] for them into scratch slot `slot`,
  // unless an earlier entry of `done` already holds x in the same layout (then shares it).
  PreparedMatmul prepare(const WeightView& w, const float* x, int64_t n, int slot,
                         std::span<const PreparedMatmul> done);
  // prepare() into a given buffer; large inputs are converted by the pool unless
  // `convert_in_parallel` is false (the caller runs inside a parallel region).
  PreparedMatmul prepare_into(const WeightView& w, const float* x, int64_t n, std::vector<uint8_t>& scratch,
                              std::span<const PreparedMatmul> done, bool convert_in_parallel);
  // The grouped calls: each group's output rows in chunks of the one shared counter; a gated
  // group's chunk also runs up and the activation.
  void run_grouped(std::span<const PreparedMatmul> gates, std::span<const PreparedMatmul> ups,
                   std::span<const int64_t> ns, std::span<float* const> outs, std::span<float* const> up_outs,
                   GatedActivation act);
  // prepare() for each of ws in turn, into prepared[0 .. ws.size()).
  void prepare_all(std::span<const WeightView> ws, const float* x, int64_t n, PreparedMatmul* prepared);
  // chunk_task(c) for c in [0, chunks), the pool's threads taking chunks from a shared counter
  // (or this thread alone when no matrix of the call has more than kRowGrain rows).
  void run_chunks(int64_t max_rows, int64_t chunks, const std::function<void(int64_t)>& chunk_task);
  // Output rows [begin, end) of a prepared matmul over n tokens into y (row stride m.rows).
  static void run_rows(const PreparedMatmul& m, int64_t n, int64_t begin, int64_t end, float* y);
  // Rows per chunk of a matrix of `rows` rows run over n tokens by `threads` threads. The threads
  // of a call take chunks from a shared counter instead of a fixed share each: a thread that
  // another process delays (the machines this runs on are shared) leaves its chunks to the others
  // instead of holding up the whole call. Results do not depend on who runs a chunk (kernels.h).
  static int64_t chunk_rows(int64_t rows, int64_t n, int threads, const cpu::FormatKernels& kernels);
  // x += y (y may be null), then out = the norm of each row: RMSNorm, or LayerNorm (`centered`)
  // with an optional bias.
  void row_norm(float* x, const float* y, const float* weight, const float* bias, bool centered, int64_t n,
                int64_t width, float eps, float* out);

  ThreadPool pool_;
  const cpu::KernelTable* kernels_;  // chosen at construction (CPUID, KESTREL_ISA)
  // Activations converted for the matmul kernels, one buffer per matrix of a call.
  std::vector<uint8_t> activation_scratch_[kMaxMatmuls];
  std::vector<float> up_scratch_;  // gated_ffn's x . up^T
  std::vector<std::vector<uint8_t>> grouped_scratch_;  // the grouped calls' converted inputs
};

}  // namespace kestrel
