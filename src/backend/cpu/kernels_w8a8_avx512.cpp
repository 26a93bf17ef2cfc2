// AVX-512 VNNI kernel for W8A8 (core/dtype.h): INT8_PC weight rows against activations quantized
// per token. A converted activation row is a 64-byte header (F32 scale d_a = amax / 127, int32
// sum of the q) and the k int8 q, zero-padded to a multiple of 64, so one step is 64 elements and
// a row's dot is ONE integer sum:
//   lanes += dpbusd(w + 128, q_a)  over the row,  dot = sum(lanes) - 128 * sum(q_a)   (exact)
//   y = float(dot) * (w_scale * d_a)
// (the weights are made unsigned by flipping their sign bit; a partial last step loads zero
// weights, which become 128, against the activations' zero padding). The q are bit for bit those of
// the reference quantizer (quantize_row_int8_pc on the token's row).
// GCC 12 reports its own _mm512_undefined_* helpers as uninitialised once inlined (as in
// kernels_q8_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_simd_avx512.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

constexpr int64_t kHeader = 64;  // d_a (F32), sum of q (int32), padding

int64_t w8a8_row_bytes(int64_t k) { return kHeader + (k + 63) / 64 * 64; }

void convert_per_token(const float* x, uint8_t* out, int64_t k) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 m = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) m = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)), m);
  if (i < k) m = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_maskz_loadu_ps(first_lanes16(k - i), x + i)), m);
  const float amax = _mm512_reduce_max_ps(m);
  const float d = amax / 127.0f;
  const __m512 inverse = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  int8_t* q = reinterpret_cast<int8_t*>(out + kHeader);
  __m512i sum = _mm512_setzero_si512();
  for (i = 0; i < k; i += 16) {
    const __mmask16 valid = first_lanes16(k - i < 16 ? k - i : 16);
    __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(valid, x + i), inverse);
    s = _mm512_roundscale_ps(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i v = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(s, lo), hi));
    sum = _mm512_add_epi32(sum, v);
    _mm_mask_storeu_epi8(q + i, valid, _mm512_cvtepi32_epi8(v));
  }
  const int64_t padded = (k + 63) / 64 * 64;
  for (int64_t j = k; j < padded; ++j) q[j] = 0;
  const int32_t total = _mm512_reduce_add_epi32(sum);
  std::memcpy(out, &d, 4);
  std::memcpy(out + 4, &total, 4);
  std::memset(out + 8, 0, size_t(kHeader - 8));
}

struct W8A8Kernel {
  static constexpr int kRows = 4, kTokens = 4, kDecodeRows = 4;
  static constexpr int64_t kStepBytes = 64;
  using Acc = __m512i;
  using W = __m512i;  // 64 weights + 128, unsigned
  using A = const uint8_t*;
  static int64_t steps(int64_t k) { return (k + 63) / 64; }
  static int64_t direct_steps(int64_t k) { return k / 64; }
  static Acc zero() { return _mm512_setzero_si512(); }
  static W flip(__m512i v) { return _mm512_xor_si512(v, _mm512_set1_epi8(char(0x80))); }
  static W load_w(const uint8_t* row, int64_t s) {
    return flip(_mm512_loadu_si512(row + quant::kPerChannelHeaderBytes + 64 * s));
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    return flip(_mm512_maskz_loadu_epi8(first_lanes64(k - 64 * s), row + quant::kPerChannelHeaderBytes + 64 * s));
  }
  static A load_a(const uint8_t* act, int64_t s) { return act + kHeader + 64 * s; }
  static void mac(Acc& acc, W w, A a) { acc = _mm512_dpbusd_epi32(acc, w, _mm512_loadu_si512(a)); }
  static float finish_token(Acc acc, const uint8_t* row, const uint8_t* act) {
    int32_t sum_a;
    std::memcpy(&sum_a, act + 4, 4);
    const int32_t dot = _mm512_reduce_add_epi32(acc) - 128 * sum_a;
    return float(dot) * (load_f32(row) * load_f32(act));
  }
};

constexpr FormatKernels kW8A8{DType::W8A8, w8a8_row_bytes, convert_per_token, matmul_tile<W8A8Kernel>};

}  // namespace

const FormatKernels* avx512_w8a8_kernels(DType weight_type) {
  return weight_type == DType::W8A8 ? &kW8A8 : nullptr;
}

}  // namespace kestrel::cpu
