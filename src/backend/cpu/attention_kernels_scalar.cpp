// The portable attention and activation kernels: plain loops, the reference the SIMD tables are
// checked against and what runs where no SIMD table does (KESTREL_ISA=scalar, non-x86 builds).
#include <cmath>
#include <cstring>

#include "backend/cpu/attention_kernels.h"
#include "quant/format.h"
#include "quant/no_fp_contract.h"

namespace kestrel::cpu {
namespace {

// q . k in a fixed order: 8 interleaved partial sums (element d goes to lane d % 8), summed
// pairwise, so the dependency chains are short and the order never depends on the caller.
float dot(const float* q, const float* k, int hd) {
  float lane[8] = {};
  int d = 0;
  for (; d + 8 <= hd; d += 8) {
    for (int j = 0; j < 8; ++j) lane[j] = std::fma(q[d + j], k[d + j], lane[j]);
  }
  for (int j = 0; d < hd; ++d, ++j) lane[j] = std::fma(q[d], k[d], lane[j]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

float block_scores(const float* q, const float* k, int64_t stride, int count, int hd, float scale,
                   float* scores) {
  float max = -INFINITY;
  for (int i = 0; i < count; ++i) {
    scores[i] = dot(q, k + i * stride, hd) * scale;
    max = std::fmax(max, scores[i]);
  }
  return max;
}

float exp_shifted_sum(float* x, float shift, int count) {
  float sum = 0.0f;
  for (int i = 0; i < count; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

void block_accumulate(float* acc, float correction, const float* w, const float* v, int64_t stride, int count,
                      int hd) {
  const bool rescale = correction != 1.0f;
  for (int d = 0; d < hd; ++d) {
    float a = rescale ? acc[d] * correction : acc[d];
    for (int i = 0; i < count; ++i) a = std::fma(w[i], v[i * stride + d], a);
    acc[d] = a;
  }
}

// quant/'s reference dequantize_row, row by row.
template <DType T>
void decode_rows(const uint8_t* src, int64_t src_stride, int count, int head_dim, float* dst) {
  static const quant::WeightFormat& format = quant::require_format(T);
  for (int i = 0; i < count; ++i) format.dequantize_row(src + i * src_stride, dst + int64_t(i) * head_dim, head_dim);
}

// F32 rows are copied as they are.
void decode_f32(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  for (int r = 0; r < count; ++r) std::memcpy(dst + int64_t(r) * hd, src + r * src_stride, size_t(hd) * sizeof(float));
}

KvDecodeFn decoder(DType type) {
  switch (type) {
    case DType::F32: return decode_f32;
    case DType::F16: return decode_rows<DType::F16>;
    case DType::BF16: return decode_rows<DType::BF16>;
    case DType::FP8_E4M3_PC: return decode_rows<DType::FP8_E4M3_PC>;
    case DType::Q8_0: return decode_rows<DType::Q8_0>;
    case DType::Q4_0: return decode_rows<DType::Q4_0>;
    default: return nullptr;
  }
}

void silu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

// 0.5 g (1 + tanh(c (g + 0.044715 g^3))) = g * sigmoid(2c (g + 0.044715 g^3)), c = sqrt(2 / pi).
void gelu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    const float z = 2.0f * 0.7978845608028654f * (g + 0.044715f * g * g * g);
    out[i] = g / (1.0f + std::exp(-z)) * up[i];
  }
}

}  // namespace

const AttentionKernels kScalarAttention{block_scores, exp_shifted_sum, block_accumulate, decoder};
const ActivationKernels kScalarActivations{silu_mul, gelu_mul};

}  // namespace kestrel::cpu
