// AVX2 kernel for W8A8 (core/dtype.h; the AVX-512 kernel's header describes the format): INT8_PC
// weight rows against activations quantized per token, converted to a 32-byte header (F32 scale
// d_a = amax / 127) and the k int8 q (k is a multiple of 32). A step is 32 elements; a row's dot
// is one exact integer sum (|w| maddubs sign(q_a, w): pairs of products below 2 x 127^2, then madd
// with ones), then y = float(dot) * (w_scale * d_a). The q are bit for bit the reference's.
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

constexpr int64_t kHeader = 32;  // d_a (F32), padding

int64_t w8a8_row_bytes(int64_t k) { return kHeader + k; }

void convert_per_token(const float* x, uint8_t* out, int64_t k) {
  const float amax = abs_max(x, k);
  const float d = amax / 127.0f;
  const __m256 inverse = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  for (int64_t i = 0; i < k; i += 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + kHeader + i), round_to_int8x32(x + i, inverse));
  }
  std::memcpy(out, &d, 4);
  std::memset(out + 4, 0, size_t(kHeader - 4));
}

struct W8A8Kernel {
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 4;
  static constexpr int64_t kStepBytes = 32;
  using Acc = __m256i;
  using W = __m256i;
  using A = const uint8_t*;
  static int64_t steps(int64_t k) { return k / 32; }
  static int64_t direct_steps(int64_t k) { return k / 32; }
  static Acc zero() { return _mm256_setzero_si256(); }
  static W load_w(const uint8_t* row, int64_t s) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + quant::kPerChannelHeaderBytes + 32 * s));
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return act + kHeader + 32 * s; }
  static void mac(Acc& acc, W w, A a) {
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(qa, w));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  static float finish_token(Acc acc, const uint8_t* row, const uint8_t* act) {
    return float(hsum_epi32(acc)) * (load_f32(row) * load_f32(act));
  }
};

constexpr FormatKernels kW8A8{DType::W8A8, w8a8_row_bytes, convert_per_token, matmul_tile<W8A8Kernel>};

}  // namespace

const FormatKernels* avx2_w8a8_kernels(DType weight_type) {
  return weight_type == DType::W8A8 ? &kW8A8 : nullptr;
}

}  // namespace kestrel::cpu
