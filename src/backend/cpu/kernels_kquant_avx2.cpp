// AVX2 kernels for the k-quants Q4_K, Q5_K and Q6_K against Q8_K activations (kernels_q8k_common.h):
// levels in element order, one 32-element sub-block (Q4_K/Q5_K) or two 16-element ones (Q6_K) per
// 256-bit vector, maddubs + madd with the sub-block scales, then one F32 multiply-add per
// super-block (AVX2 has neither dpbusd nor GFNI, which the AVX-512 lane-major design uses). A
// decoded super-block does not fit AVX2's 16 registers; the compiler keeps it on the stack, where
// the multiply instructions read it directly. Prefill decodes 4-row tiles once per 8-step chunk into
// an L1 buffer shared by a whole token block (kernels_tile.h): one thread, n = 512, Q4_K 85 -> 115
// and Q6_K 68 -> 127 GFLOP/s against 1 x 4 unpacked tiles; decode runs 2 rows at a time.
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"

namespace kestrel::cpu {
namespace {

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// An activation super-block, read in place.
struct KquantActivation {
  const uint8_t* block;
  __m256i q(int v) const { return load256(block + Q8KLayout::kQs + 32 * v); }
  __m256i bsums() const { return load256(block + Q8KLayout::kBsums); }
  __m256 d() const { return _mm256_set1_ps(load_f32(block + Q8KLayout::kScale)); }
};

template <bool kFiveBit>
struct Q45KKernel {
  static constexpr int64_t kBlockBytes = kFiveBit ? 176 : 144, kStepBytes = kBlockBytes;
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 2, kPackSteps = 8;  // see the top
  using Acc = __m256;
  using A = KquantActivation;
  struct W {
    __m256i levels[8];  // sub-block j: elements 32j .. 32j + 31
    __m256i scales[8];  // its scale in every int16 lane
    __m256i mins;       // min of the sub-block of each of the 16 bsums
    __m256 d, neg_dmin;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm256_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    w.d = _mm256_set1_ps(fp16_to_f32(load_u16(p)));
    w.neg_dmin = _mm256_set1_ps(-fp16_to_f32(load_u16(p + 2)));
    uint64_t scales, mins;
    unpack_scales_mins(p + 4, &scales, &mins);
    const __m128i mn = _mm_cvtsi64_si128(int64_t(mins));
    w.mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
    const uint8_t* qs = p + (kFiveBit ? 48 : 16);
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i high = kFiveBit ? load256(p + 16) : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i chunk = load256(qs + 32 * c);
      w.levels[2 * c] = _mm256_and_si256(chunk, low4);
      w.levels[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(chunk, 4), low4);
    }
    for (int j = 0; j < 8; ++j) {
      if constexpr (kFiveBit) {
        // Bit j of qh[l] is the fifth bit of element 32j + l.
        const __m256i bit = _mm256_set1_epi8(char(1 << j));
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(high, bit), bit);
        w.levels[j] = _mm256_or_si256(w.levels[j], _mm256_and_si256(set, _mm256_set1_epi8(16)));
      }
      w.scales[j] = _mm256_set1_epi16(short((scales >> (8 * j)) & 0xff));
    }
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return {act + s * Q8KLayout::kBlockBytes}; }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m256i lanes = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(w.levels[j], a.q(j)), w.scales[j]));
    }
    const __m256 d = a.d();
    const __m256 mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(w.mins, a.bsums()));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(w.d, d), acc);
    acc = _mm256_fmadd_ps(mins, _mm256_mul_ps(w.neg_dmin, d), acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

struct Q6KKernel {
  static constexpr int64_t kBlockBytes = 210, kStepBytes = kBlockBytes;
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 2, kPackSteps = 8;  // see the top
  using Acc = __m256;
  using A = KquantActivation;
  struct W {
    __m256i levels[8];  // q - 32; vector 4h + q: elements 128h + 32q .. + 31
    __m256i scales[8];  // sub-block scale of each int16 pair (two sub-blocks per vector)
    __m256i start;      // -128 * sum of scale * (q - 32) per lane (activations are q_a + 128)
    __m256 d;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm256_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    w.d = _mm256_set1_ps(fp16_to_f32(load_u16(p + 208)));
    const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
    const __m256i low4 = _mm256_set1_epi8(0x0f), top2 = _mm256_set1_epi8(0x30), bias = _mm256_set1_epi8(32);
    const __m256i offset = _mm256_set1_epi8(char(0x80));
    __m256i positive = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(p + 64 * h), ql1 = load256(p + 64 * h + 32);
      const __m256i qh = load256(p + 128 + 32 * h);
      const __m256i low[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                              _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                              _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
      // Bits 2q, 2q + 1 of qh[l] are the top bits of element 128h + 32q + l: move them to 4-5.
      const __m256i top[4] = {_mm256_and_si256(_mm256_slli_epi16(qh, 4), top2),
                              _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2), _mm256_and_si256(qh, top2),
                              _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2)};
      for (int q = 0; q < 4; ++q) {
        const int v = 4 * h + q;
        w.levels[v] = _mm256_sub_epi8(_mm256_or_si256(low[q], top[q]), bias);
        w.scales[v] = _mm256_setr_m128i(_mm_set1_epi16(sc[2 * v]), _mm_set1_epi16(sc[2 * v + 1]));
        positive = _mm256_add_epi32(positive,
                                    _mm256_madd_epi16(_mm256_maddubs_epi16(offset, w.levels[v]), w.scales[v]));
      }
    }
    w.start = _mm256_sub_epi32(_mm256_setzero_si256(), positive);
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return {act + s * Q8KLayout::kBlockBytes}; }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m256i lanes = w.start;
    for (int v = 0; v < 8; ++v) {
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(a.q(v), w.levels[v]), w.scales[v]));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(w.d, a.d()), acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

constexpr FormatKernels kQ4K{DType::Q4_K, Q8KLayout::row_bytes, convert_q8_k<false>, matmul_tile<Q45KKernel<false>>};
constexpr FormatKernels kQ5K{DType::Q5_K, Q8KLayout::row_bytes, convert_q8_k<false>, matmul_tile<Q45KKernel<true>>};
constexpr FormatKernels kQ6K{DType::Q6_K, Q8KLayout::row_bytes, convert_q8_k<true>, matmul_tile<Q6KKernel>};

}  // namespace

const FormatKernels* avx2_kquant_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q4_K: return &kQ4K;
    case DType::Q5_K: return &kQ5K;
    case DType::Q6_K: return &kQ6K;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
