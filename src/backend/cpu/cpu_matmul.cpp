// The CPU backend's linear layers: one matrix (matmul), several reading the same input
// (matmul_many: attention's Q, K, V) and a gated MLP's input half (gated_ffn: gate, up and the
// activation). Inputs are converted once per layout the kernels read (kernels.h), and every
// matrix of a call runs in one parallel region whose threads take chunks of rows of each matrix
// in turn from a shared counter, which balances formats of different cost and saves the pool's
// wake-ups between them (a decode step of the 1B Llama runs 5 regions per layer instead of 7 plus 2 serial
// element-wise passes).
#include <algorithm>
#include <atomic>
#include <functional>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/attention_kernels.h"
#include "core/error.h"
#include "quant/format.h"

namespace kestrel {

CpuBackend::PreparedMatmul CpuBackend::prepare(const WeightView& w, const float* x, int64_t n, int slot,
                                               std::span<const PreparedMatmul> done) {
  return prepare_into(w, x, n, activation_scratch_[slot], done, true);
}

CpuBackend::PreparedMatmul CpuBackend::prepare_into(const WeightView& w, const float* x, int64_t n,
                                                    std::vector<uint8_t>& scratch,
                                                    std::span<const PreparedMatmul> done, bool convert_in_parallel) {
  const quant::WeightFormat& format = quant::require_format(w.type);
  const quant::WeightFormat& act_format = quant::require_format(format.activation_type);
  if (w.cols % format.block_size != 0 || w.cols % act_format.block_size != 0) {
    fail("matmul: row length {} is not a multiple of the {} block size", w.cols, dtype_name(w.type));
  }
  PreparedMatmul m;
  m.kernels = cpu::find_kernels(*kernels_, w.type);
  if (m.kernels == nullptr) fail("matmul: no CPU kernel for {} weights", dtype_name(w.type));
  m.weights = static_cast<const uint8_t*>(w.data);
  m.weight_row_bytes = quant::row_bytes(format, w.cols);
  m.rows = w.rows;
  m.cols = w.cols;
  m.act_row_bytes = m.kernels->activation_row_bytes(w.cols);
  m.input_order = w.input_order;
  if (n <= 0) return m;
  // Formats whose kernels read the same layout share one conversion (Q4_K, Q5_K and Q6_K on AVX2).
  for (const PreparedMatmul& earlier : done) {
    if (earlier.kernels->convert_activations == m.kernels->convert_activations && earlier.cols == m.cols &&
        earlier.act_row_bytes == m.act_row_bytes && earlier.input_order == w.input_order) {
      m.activations = earlier.activations;
      return m;
    }
  }
  scratch.resize(size_t(n * m.act_row_bytes) + 64);
  uint8_t* activations = scratch.data();
  activations += (64 - reinterpret_cast<uintptr_t>(activations) % 64) % 64;  // 64-byte aligned rows
  auto convert = [&](int64_t begin, int64_t end) {
    std::vector<float> ordered(w.input_order != nullptr ? size_t(w.cols) : 0);
    for (int64_t t = begin; t < end; ++t) {
      const float* row = x + t * w.cols;
      if (w.input_order != nullptr) {
        for (int64_t c = 0; c < w.cols; ++c) ordered[size_t(c)] = row[w.input_order[c]];
        row = ordered.data();
      }
      m.kernels->convert_activations(row, activations + t * m.act_row_bytes, w.cols);
    }
  };
  if (convert_in_parallel && n * w.cols >= 16384) {
    pool_.parallel_for(n, convert);
  } else {
    convert(0, n);
  }
  m.activations = activations;
  return m;
}

void CpuBackend::run_rows(const PreparedMatmul& m, int64_t n, int64_t begin, int64_t end, float* y) {
  if (begin >= end) return;
  // The kernel reads each weight row once per block of tokens whose activations fit in L2
  // (kernels_tile.h), so once per call for most batches. A (row, token) result does not depend
  // on the range it falls in (kernels.h): results are the same for any thread count.
  m.kernels->matmul_tile(m.weights + begin * m.weight_row_bytes, m.weight_row_bytes, end - begin,
                         m.activations, m.act_row_bytes, n, m.cols, y + begin, m.rows);
}

void CpuBackend::prepare_all(std::span<const WeightView> ws, const float* x, int64_t n,
                             PreparedMatmul* prepared) {
  for (size_t i = 0; i < ws.size(); ++i) {
    prepared[i] = prepare(ws[i], x, n, int(i), std::span<const PreparedMatmul>(prepared, i));
  }
}

void CpuBackend::run_chunks(int64_t max_rows, int64_t chunks, const std::function<void(int64_t)>& chunk_task) {
  std::atomic<int64_t> next{0};
  auto take_chunks = [&](int, int) {
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      chunk_task(c);
    }
  };
  // A call whose every matrix fits in one thread's grain is not worth waking the pool for.
  if (max_rows <= kRowGrain) {
    take_chunks(0, 1);
  } else {
    pool_.run(take_chunks);
  }
}

int64_t CpuBackend::chunk_rows(int64_t rows, int64_t n, int threads, const cpu::FormatKernels& kernels) {
  const int64_t chunks = threads * (n == 1 ? kernels.decode_chunks_per_thread : kChunksPerThread);
  const int64_t target = (rows + chunks - 1) / chunks;
  return std::max<int64_t>(kChunkAlign, (target + kChunkAlign - 1) / kChunkAlign * kChunkAlign);
}

void CpuBackend::matmul(const WeightView& w, const float* x, int64_t n, float* y) {
  float* const ys[1] = {y};
  matmul_many(std::span<const WeightView>(&w, 1), x, n, ys);
}

void CpuBackend::matmul_many(std::span<const WeightView> ws, const float* x, int64_t n,
                             std::span<float* const> ys) {
  if (ws.size() != ys.size() || ws.empty() || ws.size() > size_t(kMaxMatmuls)) {
    fail("internal: matmul_many takes 1..{} matrices, each with an output", kMaxMatmuls);
  }
  for (const WeightView& w : ws) {
    if (w.cols != ws[0].cols) fail("internal: matmul_many's matrices read inputs of different widths");
  }
  PreparedMatmul prepared[kMaxMatmuls];
  const size_t count = ws.size();
  prepare_all(ws, x, n, prepared);
  if (n <= 0) return;
  int64_t max_rows = 0;
  for (const WeightView& w : ws) max_rows = std::max(max_rows, w.rows);
  // Chunks [first[i], first[i + 1]) of the shared counter belong to matrix i.
  int64_t chunk[kMaxMatmuls], first[kMaxMatmuls + 1] = {0};
  for (size_t i = 0; i < count; ++i) {
    chunk[i] = chunk_rows(prepared[i].rows, n, pool_.num_threads(), *prepared[i].kernels);
    first[i + 1] = first[i] + (prepared[i].rows + chunk[i] - 1) / chunk[i];
  }
  run_chunks(max_rows, first[count], [&](int64_t c) {
    size_t i = 0;
    while (c >= first[i + 1]) ++i;
    const int64_t begin = (c - first[i]) * chunk[i];
    run_rows(prepared[i], n, begin, std::min(prepared[i].rows, begin + chunk[i]), ys[i]);
  });
}

void CpuBackend::gated_ffn(const WeightView& gate, const WeightView& up, GatedActivation act,
                           const float* x, int64_t n, float* out) {
  if (gate.rows != up.rows || gate.cols != up.cols) {
    fail("internal: gated_ffn's gate ({} x {}) and up ({} x {}) differ in shape", gate.rows, gate.cols,
         up.rows, up.cols);
  }
  const WeightView pair[2] = {gate, up};
  PreparedMatmul prepared[2];
  prepare_all(pair, x, n, prepared);
  if (n <= 0) return;
  const int64_t rows = gate.rows;
  up_scratch_.resize(size_t(n * rows));
  float* up_out = up_scratch_.data();
  const int64_t chunk = chunk_rows(rows, n, pool_.num_threads(), *prepared[0].kernels);
  run_chunks(rows, (rows + chunk - 1) / chunk, [&](int64_t c) {
    const int64_t begin = c * chunk, end = std::min(rows, begin + chunk);
    run_rows(prepared[0], n, begin, end, out);
    run_rows(prepared[1], n, begin, end, up_out);
    // The activation over this chunk's columns of every token, while they are in this cache.
    for (int64_t t = 0; t < n; ++t) {
      float* g = out + t * rows + begin;
      const float* u = up_out + t * rows + begin;
      if (act == GatedActivation::GeluTanh) {
        kernels_->activations->gelu_mul(g, u, end - begin, g);
      } else {
        kernels_->activations->silu_mul(g, u, end - begin, g);
      }
    }
  });
}

// The grouped calls (a Mixture-of-Experts layer's experts): every group's input converted first,
// then one parallel region over all groups' row chunks, so a decode step's k experts cost one
// pool wake-up instead of k and the threads balance across experts of different sizes.
void CpuBackend::matmul_grouped(std::span<const MatmulGroup> groups) {
  const size_t count = groups.size();
  if (grouped_scratch_.size() < count) grouped_scratch_.resize(count);
  std::vector<PreparedMatmul> prepared(count);
  std::vector<int64_t> ns(count);
  std::vector<float*> outs(count);
  int64_t elements = 0;
  for (const MatmulGroup& g : groups) elements += g.n * g.w.cols;
  const bool parallel_convert = elements >= (int64_t(1) << 16);
  auto convert = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const MatmulGroup& g = groups[size_t(i)];
      prepared[size_t(i)] = prepare_into(g.w, g.x, g.n, grouped_scratch_[size_t(i)], {}, false);
    }
  };
  if (parallel_convert) {
    pool_.parallel_for(int64_t(count), convert);
  } else {
    convert(0, int64_t(count));
  }
  for (size_t i = 0; i < count; ++i) {
    ns[i] = groups[i].n;
    outs[i] = groups[i].y;
  }
  run_grouped(prepared, {}, ns, outs, {}, GatedActivation::Silu);
}

void CpuBackend::gated_ffn_grouped(std::span<const GatedFfnGroup> groups, GatedActivation act) {
  const size_t count = groups.size();
  if (grouped_scratch_.size() < 2 * count) grouped_scratch_.resize(2 * count);
  std::vector<PreparedMatmul> gates(count), ups(count);
  std::vector<int64_t> ns(count);
  std::vector<float*> outs(count), up_outs(count);
  int64_t elements = 0, up_values = 0;
  for (const GatedFfnGroup& g : groups) {
    if (g.gate.rows != g.up.rows || g.gate.cols != g.up.cols) {
      fail("internal: gated_ffn_grouped's gate ({} x {}) and up ({} x {}) differ in shape", g.gate.rows,
           g.gate.cols, g.up.rows, g.up.cols);
    }
    elements += g.n * g.gate.cols;
    up_values += g.n * g.gate.rows;
  }
  up_scratch_.resize(size_t(up_values));
  auto convert = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const GatedFfnGroup& g = groups[size_t(i)];
      gates[size_t(i)] = prepare_into(g.gate, g.x, g.n, grouped_scratch_[size_t(2 * i)], {}, false);
      ups[size_t(i)] = prepare_into(g.up, g.x, g.n, grouped_scratch_[size_t(2 * i + 1)],
                                    std::span<const PreparedMatmul>(&gates[size_t(i)], 1), false);
    }
  };
  if (elements >= (int64_t(1) << 16)) {
    pool_.parallel_for(int64_t(count), convert);
  } else {
    convert(0, int64_t(count));
  }
  float* up_out = up_scratch_.data();
  for (size_t i = 0; i < count; ++i) {
    ns[i] = groups[i].n;
    outs[i] = groups[i].out;
    up_outs[i] = up_out;
    up_out += groups[i].n * groups[i].gate.rows;
  }
  run_grouped(gates, ups, ns, outs, up_outs, act);
}

void CpuBackend::run_grouped(std::span<const PreparedMatmul> gates, std::span<const PreparedMatmul> ups,
                             std::span<const int64_t> ns, std::span<float* const> outs,
                             std::span<float* const> up_outs, GatedActivation act) {
  const size_t count = gates.size();
  // Chunks [first[i], first[i + 1]) of the shared counter belong to group i.
  std::vector<int64_t> chunk(count), first(count + 1, 0);
  int64_t max_rows = 0;
  for (size_t i = 0; i < count; ++i) {
    const int64_t rows = ns[i] > 0 ? gates[i].rows : 0;
    max_rows = std::max(max_rows, rows);
    chunk[i] = chunk_rows(gates[i].rows, ns[i], pool_.num_threads(), *gates[i].kernels);
    first[i + 1] = first[i] + (rows + chunk[i] - 1) / chunk[i];
  }
  if (first[count] == 0) return;
  const bool gated = !ups.empty();
  run_chunks(max_rows * int64_t(count), first[count], [&](int64_t c) {
    const size_t i = size_t(std::upper_bound(first.begin(), first.end(), c) - first.begin()) - 1;
    const int64_t n = ns[i], rows = gates[i].rows;
    const int64_t begin = (c - first[i]) * chunk[i], end = std::min(rows, begin + chunk[i]);
    run_rows(gates[i], n, begin, end, outs[i]);
    if (!gated) return;
    run_rows(ups[i], n, begin, end, up_outs[i]);
    for (int64_t t = 0; t < n; ++t) {
      float* g = outs[i] + t * rows + begin;
      const float* u = up_outs[i] + t * rows + begin;
      if (act == GatedActivation::GeluTanh) {
        kernels_->activations->gelu_mul(g, u, end - begin, g);
      } else {
        kernels_->activations->silu_mul(g, u, end - begin, g);
      }
    }
  });
}

}  // namespace kestrel
