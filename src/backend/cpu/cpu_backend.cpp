#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/head_transforms.h"
#include "backend/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "quant/format.h"

namespace kestrel {

std::unique_ptr<Backend> make_cpu_backend(int num_threads) {
  return std::make_unique<CpuBackend>(num_threads);
}

DType cpu_compute_encoding(DType stored) {
  // KESTREL_REPACK=0 keeps every stored type (llama.cpp's --no-repack): less memory, slower kernels.
  if (const char* repack = std::getenv("KESTREL_REPACK"); repack != nullptr && std::string_view(repack) == "0") {
    return stored;
  }
  const cpu::KernelTable& table = cpu::active_kernels();
  return table.compute_encoding != nullptr ? table.compute_encoding(stored) : stored;
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

void CpuBackend::row_norm(float* x, const float* y, const float* weight, const float* bias, bool centered,
                          int64_t n, int64_t width, float eps, float* out) {
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* row = x + i * width;
      if (y != nullptr) {
        const float* add = y + i * width;
        for (int64_t j = 0; j < width; ++j) row[j] += add[j];
      }
      // Sums in double, as llama.cpp's ggml_rms_norm does: width is in the thousands.
      double mean = 0.0;
      if (centered) {
        for (int64_t j = 0; j < width; ++j) mean += double(row[j]);
        mean /= double(width);
      }
      double sum_squares = 0.0;
      for (int64_t j = 0; j < width; ++j) sum_squares += (double(row[j]) - mean) * (double(row[j]) - mean);
      const float scale = float(1.0 / std::sqrt(sum_squares / double(width) + double(eps)));
      float* dst = out + i * width;
      if (centered) {
        const float m = float(mean);
        for (int64_t j = 0; j < width; ++j) dst[j] = (row[j] - m) * scale * weight[j] + (bias ? bias[j] : 0.0f);
      } else {
        for (int64_t j = 0; j < width; ++j) dst[j] = row[j] * scale * weight[j];
      }
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
  row_norm(const_cast<float*>(x), nullptr, weight, nullptr, false, n, width, eps, out);
}

void CpuBackend::add_rms_norm(float* x, const float* y, const float* weight, int64_t n, int64_t width,
                              float eps, float* out) {
  row_norm(x, y, weight, nullptr, false, n, width, eps, out);
}

void CpuBackend::layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t width,
                            float eps, float* out) {
  row_norm(const_cast<float*>(x), nullptr, weight, bias, true, n, width, eps, out);
}

void CpuBackend::add_layer_norm(float* x, const float* y, const float* weight, const float* bias, int64_t n,
                                int64_t width, float eps, float* out) {
  row_norm(x, y, weight, bias, true, n, width, eps, out);
}

void CpuBackend::rope(float* x, const int32_t* positions, int64_t n, int n_heads, int head_dim,
                      const RopeParams& params) {
  const size_t half = size_t(std::max(1, params.n_rot / 2));
  std::vector<float> inv_freq(half), cos_theta(half), sin_theta(half);
  cpu::rope_inv_freq(params, inv_freq.data());
  for (int64_t t = 0; t < n; ++t) {
    // The angles once per token, for all its heads.
    cpu::rope_angles(float(positions[t]), params, inv_freq.data(), cos_theta.data(), sin_theta.data());
    if (params.attn_factor != 1.0f) {
      for (size_t i = 0; i < half; ++i) {
        cos_theta[i] *= params.attn_factor;
        sin_theta[i] *= params.attn_factor;
      }
    }
    for (int h = 0; h < n_heads; ++h) {
      cpu::rope_apply(x + (t * n_heads + h) * head_dim, params, cos_theta.data(), sin_theta.data());
    }
  }
}

void CpuBackend::hadamard(float* x, int64_t rows, int head_dim) {
  if (head_dim <= 0 || (head_dim & (head_dim - 1)) != 0) {
    fail("hadamard: head size {} is not a power of two", head_dim);
  }
  for (int64_t r = 0; r < rows; ++r) cpu::hadamard_head(x + r * head_dim, head_dim);
}

void CpuBackend::silu_mul(const float* gate, const float* up, int64_t count, float* out) {
  kernels_->activations->silu_mul(gate, up, count, out);
}

void CpuBackend::add(float* x, const float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

void CpuBackend::kv_write(const KvLayerView& cache, const float* k, const float* v,
                          const int64_t* slot_mapping, int64_t n, int n_kv_head, int head_dim) {
  // Each head of each token is one row of the cache's type (quant/'s reference quantizers: the
  // values a scalar reference of attention expects, whatever the ISA).
  const quant::WeightFormat& k_format = quant::require_format(cache.k_type);
  const quant::WeightFormat& v_format = quant::require_format(cache.v_type);
  const int64_t width = int64_t(n_kv_head) * head_dim;
  const bool v_is_k = cache.v == cache.k;  // latent attention: V's rows are K's, written once
  if (n_kv_head != cache.n_kv_head) fail("internal: kv_write of {} KV heads into a cache of {}", n_kv_head, cache.n_kv_head);
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (slot_mapping[t] < 0) continue;  // a padding token with no slot
      for (int h = 0; h < n_kv_head; ++h) {
        const float* k_src = k + t * width + int64_t(h) * head_dim;
        const float* v_src = v + t * width + int64_t(h) * head_dim;
        uint8_t* k_dst = cache.k_row(slot_mapping[t], h);
        uint8_t* v_dst = cache.v_row(slot_mapping[t], h);
        if (cache.k_type == DType::F32) {
          std::memcpy(k_dst, k_src, size_t(head_dim) * sizeof(float));
        } else {
          k_format.quantize_row(k_src, k_dst, head_dim);
        }
        if (v_is_k) continue;
        if (cache.v_type == DType::F32) {
          std::memcpy(v_dst, v_src, size_t(head_dim) * sizeof(float));
        } else {
          v_format.quantize_row(v_src, v_dst, head_dim);
        }
      }
    }
  };
  if (n * width >= 65536) {
    pool_.parallel_for(n, rows);
  } else {
    rows(0, n);
  }
}

void CpuBackend::paged_attention(const PagedAttentionArgs& args, const float* q,
                                 const KvLayerView& cache, float* out) {
  cpu::paged_attention(pool_, *kernels_->attention, args, q, cache, out);
}

}  // namespace kestrel
