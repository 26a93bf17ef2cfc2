// AVX2 kernels for the 8-bit formats, Q8_0 (blocks of 32 int8 q with an F16 scale) and INT8_PC
// (int8 q with one F32 scale per row), against Q8_0 activations widened to int16. The other Q8 formats (kernels_q8_avx2.cpp) multiply bytes with maddubs, which
// for two signed operands needs the sign trick (|w| times a with w's sign): 2 sign + 1 maddubs +
// 1 madd per 32 products, all on the two pipes Zen 3 runs multiplies and FMAs on. With int16
// activations one madd does 16 products exactly (each pair sum <= 2 x 128 x 127 fits int32) and
// the signs need nothing: 2 madds per 32 products.
//
// Prefill (n >= kInterleavedTokens, kernels_interleave_avx2.h) interleaves 4 weight rows 4
// elements (8 bytes of int16) at a time, so one madd against a token's 4 broadcast activations
// serves 4 rows, and converts, scales and accumulates 2 blocks x 4 rows with one cvt, mul and
// FMA. Every path reduces a block to its exact int32 dot D_b per (row, token) and accumulates
// it as E = fma(float(D_b), (weight scale x activation scale), E) for even blocks b and O likewise
// for odd ones; a row's result is E + O. So decode, small batches and the interleaved tiles give
// bitwise the same results (kernels.h), and no float rounding depends on the tile.
//
// Activation row layout (Q8_0Steps): steps of 64 elements = 2 blocks,
//   q[64]   int16, the blocks' q in element order (zero past k)
//   da[8]   F32: d0, d0, d1, d1, d0, d0, d1, d1 (the blocks' scales, F16-rounded as the reference
//           uses them; the lanes the interleaved tiles multiply with)
#include "backend/cpu/kernels_interleave_avx2.h"
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

struct Q8_0Steps {
  static constexpr int64_t kElements = 64, kQ = 0, kScale = 128, kBytes = 160;
  static int64_t steps(int64_t k) { return (k + kElements - 1) / kElements; }
  static int64_t row_bytes(int64_t k) { return steps(k) * kBytes; }
};

void convert_q8_0_int16(const float* x, uint8_t* out, int64_t k) {
  quantize_block_pairs(x, out, k, Q8_0Steps::kBytes, [](uint8_t* step, int half, const int8_t* q, float d, int32_t) {
    const __m256i bytes = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
    uint8_t* q16 = step + Q8_0Steps::kQ + 64 * half;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q16), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(bytes)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q16 + 32), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(bytes, 1)));
    store_half_lanes(step + Q8_0Steps::kScale, half, &d);
  });
}

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i widen16(const uint8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The two weight layouts: blocks of 32 int8 q, scaled per block (Q8_0: an F16 d before each block)
// or per row (INT8_PC: an F32 header, the row's scale, which serves as every block's d here;
// products and sums are the same, only the float rounding order differs from the reference).
struct Q8_0Blocks {
  static constexpr int64_t kHeader = 0, kBlockBytes = 34, kQs = 2;
  // (d0, d1, 0, 0) of the step at p (d1 = 0 when the step has one block).
  static __m128 scales(const uint8_t*, const uint8_t* p, bool two) {
    const uint32_t d1 = two ? load_u16(p + kBlockBytes) : 0;
    return _mm_cvtph_ps(_mm_cvtsi32_si128(int(uint32_t(load_u16(p)) | d1 << 16)));
  }
};
struct Int8PcBlocks {
  static constexpr int64_t kHeader = quant::kPerChannelHeaderBytes, kBlockBytes = 32, kQs = 0;
  static __m128 scales(const uint8_t* row, const uint8_t*, bool two) {
    const float d = load_f32(row);
    return _mm_setr_ps(d, two ? d : 0.0f, 0.0f, 0.0f);
  }
};

// Row-major policy (kernels_tile.h): decode, batches under kInterleavedTokens, rows % 4.
template <class B>
struct Int8Kernel : BlockPairPolicy<Q8_0Steps> {
  // A decoded step is 5 registers: 1 row x 4 tokens fits AVX2's 16.
  static constexpr int kRows = 1, kTokens = 4, kDecodeRows = 4;
  static constexpr int64_t kStepBytes = 2 * B::kBlockBytes;  // one-token tiles prefetch
  struct W {
    __m256i q[4];  // int16 elements 0-15, 16-31, 32-47, 48-63 of the step
    __m128 scale;  // the 2 blocks' d, 0, 0
  };
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + B::kHeader + s * kStepBytes;
    const uint8_t* q0 = p + B::kQs;
    const uint8_t* q1 = p + B::kBlockBytes + B::kQs;
    return {{widen16(q0), widen16(q0 + 16), widen16(q1), widen16(q1 + 16)}, B::scales(row, p, true)};
  }
  // The last step of a row of an odd number of blocks: its second block is zero (d = 0 too).
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) {
    const uint8_t* p = row + B::kHeader + s * kStepBytes;
    const __m256i zero = _mm256_setzero_si256();
    return {{widen16(p + B::kQs), widen16(p + B::kQs + 16), zero, zero}, B::scales(row, p, false)};
  }
  // The 8 int32 lanes of block 0's (x0) and block 1's (x1) products.
  static void block_lanes(const W& w, const A& a, __m256i* x0, __m256i* x1) {
    const uint8_t* q = a.step + Q8_0Steps::kQ;
    *x0 = _mm256_add_epi32(_mm256_madd_epi16(w.q[0], load256(q)), _mm256_madd_epi16(w.q[1], load256(q + 32)));
    *x1 = _mm256_add_epi32(_mm256_madd_epi16(w.q[2], load256(q + 64)), _mm256_madd_epi16(w.q[3], load256(q + 96)));
  }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m256i x0, x1;
    block_lanes(w, a, &x0, &x1);
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(lane_sums2(x0, x1)), _mm_mul_ps(w.scale, act_scales(a)), acc);
  }
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) { mac(acc, load_w(row, s), a); }
  // Two rows: one hadd tree gives (D0, D1) of both, and one cvt, mul and FMA serve both.
  static void mac_direct2(Acc& acc0, Acc& acc1, const uint8_t* row0, const uint8_t* row1, int64_t s, const A& a) {
    const W w0 = load_w(row0, s), w1 = load_w(row1, s);
    __m256i x00, x01, x10, x11;
    block_lanes(w0, a, &x00, &x01);
    block_lanes(w1, a, &x10, &x11);
    const __m128 scale = _mm_mul_ps(_mm_movelh_ps(w0.scale, w1.scale), act_scales(a));
    // acc0 carries both rows' E, O (lanes 2, 3: row 1's, which only this reads; mac never changes
    // them) and acc1 gets row 1's copy, so the chain from step to step is one FMA.
    acc0 = _mm_fmadd_ps(_mm_cvtepi32_ps(block_dots2(x00, x01, x10, x11)), scale, acc0);
    acc1 = _mm_movehl_ps(acc0, acc0);
  }
};

// Prefill: one step of 4 rows.
struct Q8_0Interleaved4 {
  __m256i q[16];  // [4j + g]: int16 elements 16j + 4g .. + 3 of rows 0, 1, 2, 3
  __m256 scale;   // d0 and d1 of rows 0, 1 (d0 r0, d0 r1, d1 r0, d1 r1) | the same of rows 2, 3
};

template <class B>
struct Int8Interleave : BlockPairInterleaveSteps<Q8_0Steps> {  // a chunk: 8.5 KB of decoded rows
  using Kernel = Int8Kernel<B>;
  using Block = Q8_0Interleaved4;
  static void interleave(const uint8_t* w, int64_t w_stride, int64_t s, int64_t k, Block& out) {
    typename Kernel::W rows[4];
    decode_4_rows<Kernel>(w, w_stride, s, k, rows);
    for (int j = 0; j < 4; ++j) {
      const __m256i l[4] = {rows[0].q[j], rows[1].q[j], rows[2].q[j], rows[3].q[j]};
      interleave_rows(l, &out.q[4 * j]);
    }
    out.scale = interleaved_scales(rows[0].scale, rows[1].scale, rows[2].scale, rows[3].scale);
  }
  template <int T>
  static void step(const Block& b, const uint8_t* const a[T], Acc acc[T]) {
    __m256i sums[2][T];  // [block][token]: 2 int32 lanes per row, as the scale vector's halves
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) sums[half][t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m256i w = b.q[8 * half + g];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          int64_t four;  // 4 int16 activations
          std::memcpy(&four, a[t] + Q8_0Steps::kQ + 64 * half + 8 * g, 8);
          sums[half][t] = _mm256_add_epi32(sums[half][t], _mm256_madd_epi16(w, _mm256_set1_epi64x(four)));
          // Keeps each sum in a register as it grows: left free, GCC computed the 8 products of a
          // block first and spilled them (one Zen 3 core: 40 against 120 GFLOP/s in L1).
          __asm__("" : "+x"(sums[half][t]));
        }
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i dots = _mm256_hadd_epi32(sums[0][t], sums[1][t]);  // D0 r0, D0 r1, D1 r0, D1 r1 | r2, r3
      const __m256 da = _mm256_loadu_ps(reinterpret_cast<const float*>(a[t] + Q8_0Steps::kScale));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_mul_ps(b.scale, da), acc[t]);
    }
  }
};

constexpr FormatKernels kQ8_0{DType::Q8_0, Q8_0Steps::row_bytes, convert_q8_0_int16,
                              interleaved_matmul<Int8Interleave<Q8_0Blocks>>};
constexpr FormatKernels kInt8Pc{DType::INT8_PC, Q8_0Steps::row_bytes, convert_q8_0_int16,
                                interleaved_matmul<Int8Interleave<Int8PcBlocks>>};

}  // namespace

const FormatKernels* avx2_q8_0_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q8_0: return &kQ8_0;
    case DType::INT8_PC: return &kInt8Pc;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
