#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/vec_math.h"

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

void CpuBackend::row_norm(float* x, const float* y, const float* weight, int64_t n, int64_t width,
                          float eps, float* out) {
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* row = x + i * width;
      if (y != nullptr) {
        const float* add = y + i * width;
        for (int64_t j = 0; j < width; ++j) row[j] += add[j];
      }
      // Sum of squares in double, as llama.cpp's ggml_rms_norm does: width is in the thousands.
      double sum_squares = 0.0;
      for (int64_t j = 0; j < width; ++j) sum_squares += double(row[j]) * double(row[j]);
      const float scale = float(1.0 / std::sqrt(sum_squares / double(width) + double(eps)));
      float* dst = out + i * width;
      for (int64_t j = 0; j < width; ++j) dst[j] = row[j] * scale * weight[j];
    }
  };
  // Prefill-sized batches split rows across threads; a decode step's few rows are not worth a wake-up.
  if (n * width >= 65536) {
    pool_.parallel_for(n, rows);
  } else {
    rows(0, n);
  }
}

void CpuBackend::rms_norm(const float* x, const float* weight, int64_t n, int64_t width, float eps,
                          float* out) {
  // In place (x == out) or not: row_norm reads a row fully before writing its output.
  row_norm(const_cast<float*>(x), nullptr, weight, n, width, eps, out);
}

void CpuBackend::add_rms_norm(float* x, const float* y, const float* weight, int64_t n, int64_t width,
                              float eps, float* out) {
  row_norm(x, y, weight, n, width, eps, out);
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
  cpu::gated_activation<cpu::GateKind::Silu>(gate, up, count, out);
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
