// The CPU backend: plain reference kernels, multi-threaded across output rows / heads with a
// persistent thread pool. The fast-kernels work replaces the inner loops, not this structure.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int num_threads);

  void matmul(const WeightView& w, const float* x, int64_t n, float* y) override;
  void get_rows(const WeightView& table, const int32_t* ids, int64_t n, float* out) override;
  void rms_norm(const float* x, const float* weight, int64_t n, int64_t width, float eps,
                float* out) override;
  void rope(float* x, const int32_t* positions, int64_t n, int n_heads, int head_dim,
            const RopeParams& params) override;
  void silu_mul(const float* gate, const float* up, int64_t count, float* out) override;
  void gelu_mul(const float* gate, const float* up, int64_t count, float* out) override;
  void add(float* x, const float* y, int64_t count) override;
  void add_row(float* x, const float* row, int64_t n, int64_t width) override;
  void scale(float* x, float s, int64_t count) override;
  void softcap(float* x, float cap, int64_t count) override;
  void kv_write(const KvLayerView& cache, const float* k, const float* v,
                const int64_t* slot_mapping, int64_t n, int64_t kv_width) override;
  void paged_attention(const PagedAttentionArgs& args, const float* q, const KvLayerView& cache,
                       float* out) override;

 private:
  ThreadPool pool_;
  const cpu::KernelTable* kernels_;          // chosen at construction (CPUID, KESTREL_ISA)
  std::vector<uint8_t> activation_scratch_;  // activations converted for the matmul kernel
};

}  // namespace kestrel
