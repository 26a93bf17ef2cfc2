#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/format.h"

namespace kestrel {

std::unique_ptr<Backend> make_cpu_backend(int num_threads) {
  return std::make_unique<CpuBackend>(num_threads);
}

CpuBackend::CpuBackend(int num_threads)
    : pool_(num_threads), kernels_(&cpu::active_kernels()) {}

void CpuBackend::matmul(const WeightView& w, const float* x, int64_t n, float* y) {
  const quant::WeightFormat& format = quant::require_format(w.type);
  const quant::WeightFormat& act_format = quant::require_format(format.activation_type);
  if (w.cols % format.block_size != 0 || w.cols % act_format.block_size != 0) {
    fail("matmul: row length {} is not a multiple of the {} block size", w.cols, dtype_name(w.type));
  }
  const cpu::FormatKernels* kernels = cpu::find_kernels(*kernels_, w.type);
  if (kernels == nullptr) fail("matmul: no CPU kernel for {} weights", dtype_name(w.type));
  if (n <= 0 || w.rows <= 0) return;
  const int64_t weight_row_bytes = quant::row_bytes(format, w.cols);
  const int64_t act_row_bytes = kernels->activation_row_bytes(w.cols);

  // Convert every activation row once per call (not once per weight row), into 64-byte aligned
  // rows in the layout the kernel reads.
  activation_scratch_.resize(size_t(n * act_row_bytes) + 64);
  uint8_t* activations = activation_scratch_.data();
  activations += (64 - reinterpret_cast<uintptr_t>(activations) % 64) % 64;
  auto convert = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      kernels->convert_activations(x + t * w.cols, activations + t * act_row_bytes, w.cols);
    }
  };
  if (n * w.cols >= 16384) {
    pool_.parallel_for(n, convert);
  } else {
    convert(0, n);
  }

  // Each thread takes a contiguous range of weight rows and runs the tile kernel over it with
  // every token; the kernel reads each weight row from memory once per block of tokens whose
  // activations fit in L2 (kernels_tile.h: 64-200 tokens), so once per call for most batches.
  // A (row, token) result does not depend on the range it falls in (kernels.h), so results are
  // the same for any thread count.
  const auto* weight_bytes = static_cast<const uint8_t*>(w.data);
  pool_.parallel_for(
      w.rows,
      [&](int64_t begin, int64_t end) {
        kernels->matmul_tile(weight_bytes + begin * weight_row_bytes, weight_row_bytes, end - begin,
                             activations, act_row_bytes, n, w.cols, y + begin, w.rows);
      },
      16);
}

void CpuBackend::get_rows(const WeightView& table, const int32_t* ids, int64_t n, float* out) {
  const quant::WeightFormat& format = quant::require_format(table.type);
  const int64_t row_bytes = quant::row_bytes(format, table.cols);
  const auto* bytes = static_cast<const uint8_t*>(table.data);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= table.rows) {
      fail("token id {} is outside the vocabulary (size {})", ids[i], table.rows);
    }
    format.dequantize_row(bytes + int64_t(ids[i]) * row_bytes, out + i * table.cols, table.cols);
  }
}

void CpuBackend::rms_norm(const float* x, const float* weight, int64_t n, int64_t width, float eps,
                          float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * width;
    double sum_squares = 0.0;
    for (int64_t j = 0; j < width; ++j) sum_squares += double(row[j]) * double(row[j]);
    const float scale = float(1.0 / std::sqrt(sum_squares / double(width) + double(eps)));
    float* dst = out + i * width;
    for (int64_t j = 0; j < width; ++j) dst[j] = row[j] * scale * weight[j];
  }
}

void CpuBackend::rope(float* x, const int32_t* positions, int64_t n, int n_heads, int head_dim,
                      const RopeParams& params) {
  const int half = params.n_rot / 2;
  // theta_i = pos * base^(-2i / n_rot), optionally divided by a per-frequency factor.
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    float f = std::pow(params.freq_base, -2.0f * float(i) / float(params.n_rot));
    if (params.freq_factors != nullptr) f /= params.freq_factors[i];
    inv_freq[size_t(i)] = f;
  }
  for (int64_t t = 0; t < n; ++t) {
    const float position = float(positions[t]) * params.freq_scale;
    for (int i = 0; i < half; ++i) {
      const float theta = position * inv_freq[size_t(i)];
      const float cos_theta = std::cos(theta);
      const float sin_theta = std::sin(theta);
      for (int h = 0; h < n_heads; ++h) {
        float* head = x + (t * n_heads + h) * head_dim;
        const int a = params.neox ? i : 2 * i;
        const int b = params.neox ? i + half : 2 * i + 1;
        const float x0 = head[a];
        const float x1 = head[b];
        head[a] = x0 * cos_theta - x1 * sin_theta;
        head[b] = x0 * sin_theta + x1 * cos_theta;
      }
    }
  }
}

void CpuBackend::silu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void CpuBackend::add(float* x, const float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

void CpuBackend::kv_write(const KvLayerView& cache, const float* k, const float* v,
                          const int64_t* slot_mapping, int64_t n, int64_t kv_width) {
  for (int64_t t = 0; t < n; ++t) {
    if (slot_mapping[t] < 0) continue;  // a padding token with no slot
    std::memcpy(cache.k + slot_mapping[t] * kv_width, k + t * kv_width, size_t(kv_width) * sizeof(float));
    std::memcpy(cache.v + slot_mapping[t] * kv_width, v + t * kv_width, size_t(kv_width) * sizeof(float));
  }
}

void CpuBackend::paged_attention(const PagedAttentionArgs& args, const float* q,
                                 const KvLayerView& cache, float* out) {
  cpu::paged_attention(pool_, args, q, cache, out);
}

}  // namespace kestrel
