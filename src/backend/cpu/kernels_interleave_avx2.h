// The AVX2 prefill loop shared by the formats whose tiles interleave 4 weight rows (Q4_K, Q5_K,
// Q6_K in kernels_kquant_avx2.cpp, Q8_0 in kernels_q8_0_avx2.cpp): for batches of at least
// kInterleavedTokens tokens, each step of 4 rows is decoded once per token block into an L1 buffer
// whose vectors hold a few elements of each of the 4 rows, so one integer multiply against a
// token's broadcast activations serves 4 rows. Internal linkage like kernels_tile.h (included by
// AVX2 kernel files only).
//
// An interleaved format P supplies:
//   P::Kernel                its row-major policy (kernels_tile.h), for decode, batches under
//                            kInterleavedTokens and the rows % 4 left over
//   P::Block                 one step of 4 rows, interleaved
//   P::kChunk                steps decoded at a time (the pack is kChunk Blocks, in L1)
//   P::kActStepBytes         bytes of one step of a converted activation row
//   P::steps(k)              steps in a row of k elements
//   P::interleave(w, w_stride, s, k, out)   step s of rows w, w + w_stride, .. (+ 3 w_stride)
//   P::Acc, P::zero()        one token's accumulator for the 4 rows
//   P::step<T>(block, a, acc)  acc[t] over one Block for T tokens, whose step starts at a[t]
//   P::store(acc, y)         the 4 rows' results y[0..3]
// Every (row, token) result must be bitwise the one P::Kernel's paths give (kernels.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/kernels_tile.h"

namespace kestrel::cpu {
namespace {

constexpr int kInterleavedTokens = 4;  // tokens per tile

// out[g] = bytes 8g .. 8g + 7 of l[0], l[1], l[2], l[3] (a 4 x 4 transpose of 64-bit elements).
inline void interleave_rows(const __m256i l[4], __m256i out[4]) {
  const __m256i lo01 = _mm256_unpacklo_epi64(l[0], l[1]), hi01 = _mm256_unpackhi_epi64(l[0], l[1]);
  const __m256i lo23 = _mm256_unpacklo_epi64(l[2], l[3]), hi23 = _mm256_unpackhi_epi64(l[2], l[3]);
  out[0] = _mm256_permute2x128_si256(lo01, lo23, 0x20);
  out[1] = _mm256_permute2x128_si256(hi01, hi23, 0x20);
  out[2] = _mm256_permute2x128_si256(lo01, lo23, 0x31);
  out[3] = _mm256_permute2x128_si256(hi01, hi23, 0x31);
}

// The even/odd-block accumulation of the 32-element-block formats (kernels_q8_0_avx2.cpp,
// kernels_q4_0_avx2.cpp): a step is 2 blocks; each path reduces a block to its exact int32 dot
// D_b per (row, token) and adds it as fma(float(D_b), d_weight * d_activation, E or O), E for
// even blocks, O for odd ones; a row's result is E + O.

// (sum of x0's 8 int32 lanes, of x1's, of x0's, of x1's), exact: e.g. (D0, D1, D0, D1) from the
// lanes of block 0's and block 1's products.
inline __m128i lane_sums2(__m256i x0, __m256i x1) {
  const __m256i pairs = _mm256_hadd_epi32(x0, x1);
  const __m128i quads = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
  return _mm_hadd_epi32(quads, quads);
}

// (D0, D1 of row 0, D0, D1 of row 1) from each row's two blocks' lanes, in one hadd tree.
inline __m128i block_dots2(__m256i x00, __m256i x01, __m256i x10, __m256i x11) {
  const __m256i p0 = _mm256_hadd_epi32(x00, x01), p1 = _mm256_hadd_epi32(x10, x11);
  const __m128i q0 = _mm_add_epi32(_mm256_castsi256_si128(p0), _mm256_extracti128_si256(p0, 1));
  const __m128i q1 = _mm_add_epi32(_mm256_castsi256_si128(p1), _mm256_extracti128_si256(p1, 1));
  return _mm_hadd_epi32(q0, q1);
}

// A row's result from its lanes E, O.
inline float even_plus_odd(__m128 acc) { return _mm_cvtss_f32(_mm_add_ss(acc, _mm_movehdup_ps(acc))); }

// 4 rows' (d0, d1, 0, 0) as the interleaved tiles' scale vector: d0 r0, d0 r1, d1 r0, d1 r1 | r2, r3.
inline __m256 interleaved_scales(__m128 r0, __m128 r1, __m128 r2, __m128 r3) {
  return _mm256_set_m128(_mm_unpacklo_ps(r2, r3), _mm_unpacklo_ps(r0, r1));
}

// The 4 rows' E + O from an interleaved tile's accumulator (lanes E r0, E r1, O r0, O r1 | r2, r3).
inline void store_even_plus_odd(__m256 acc, float* y) {
  const __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  const __m128 even = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(1, 0, 1, 0)), odd = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
  _mm_storeu_ps(y, _mm_add_ps(even, odd));
}

// What the block-pair formats' row-major policies (kernels_tile.h) share: a step is 2 blocks of an
// activation row laid out by Steps (steps(k), kElements, kBytes, kScale: the da[8] lanes), and a
// (row, token) accumulator holds E, O in lanes 0, 1 (lanes 2, 3 are never read).
template <class Steps>
struct BlockPairPolicy {
  using Acc = __m128;
  struct A {
    const uint8_t* step;
  };
  static int64_t steps(int64_t k) { return Steps::steps(k); }
  static int64_t direct_steps(int64_t k) { return k / Steps::kElements; }
  static Acc zero() { return _mm_setzero_ps(); }
  static A load_a(const uint8_t* act, int64_t s) { return {act + s * Steps::kBytes}; }
  // (d0, d1, d0, d1) of the activation step.
  static __m128 act_scales(const A& a) {
    const __m128 lo = _mm_loadu_ps(reinterpret_cast<const float*>(a.step + Steps::kScale));  // d0 d0 d1 d1
    return _mm_shuffle_ps(lo, lo, _MM_SHUFFLE(2, 0, 2, 0));
  }
  static float finish(Acc acc, const uint8_t*) { return even_plus_odd(acc); }
};

// And what their interleaved policies share: a token's accumulator for 4 rows, lanes E r0, E r1,
// O r0, O r1 | E r2, E r3, O r2, O r3.
template <class Steps>
struct BlockPairInterleaveSteps {
  using Acc = __m256;
  static constexpr int64_t kChunk = 16;
  static constexpr int64_t kActStepBytes = Steps::kBytes;
  static int64_t steps(int64_t k) { return Steps::steps(k); }
  static Acc zero() { return _mm256_setzero_ps(); }
  static void store(Acc acc, float* y) { store_even_plus_odd(acc, y); }
};

// Step s of weight rows w, w + w_stride, .. (+ 3 w_stride) as the row-major policy K decodes it
// (a row's last, partial step through load_w_tail): what an interleave starts from.
template <class K>
void decode_4_rows(const uint8_t* w, int64_t w_stride, int64_t s, int64_t k, typename K::W rows[4]) {
  for (int r = 0; r < 4; ++r) {
    rows[r] = s < K::direct_steps(k) ? K::load_w(w + r * w_stride, s) : K::load_w_tail(w + r * w_stride, s, k);
  }
}

// T tokens (activation rows act + t * act_stride, at the chunk's first step) against the chunk's
// `count` interleaved steps of format P; acc_io[t] holds the 4 rows' sums of token t between chunks.
template <class P, int T>
void interleaved_tile(const typename P::Block* pack, int64_t count, const uint8_t* act, int64_t act_stride,
                      bool first_chunk, typename P::Acc* acc_io) {
  typename P::Acc acc[T];
  for (int t = 0; t < T; ++t) acc[t] = first_chunk ? P::zero() : acc_io[t];
  for (int64_t s = 0; s < count; ++s) {
    const uint8_t* a[T];
    for (int t = 0; t < T; ++t) a[t] = act + t * act_stride + s * P::kActStepBytes;
    P::template step<T>(pack[s], a, acc);
  }
  for (int t = 0; t < T; ++t) acc_io[t] = acc[t];
}

// The MatmulTileFn of an interleaved format P: tiles of 4 rows x kInterleavedTokens tokens over
// chunks of P::kChunk steps decoded by P::interleave; decode, batches under kInterleavedTokens
// and the last rows % 4 run P::Kernel's row-major tiles.
template <class P>
void interleaved_matmul(const uint8_t* weights, int64_t weight_row_bytes, int64_t rows, const uint8_t* activations,
                        int64_t act_row_bytes, int64_t n, int64_t k, float* y, int64_t y_stride) {
  const int64_t rows4 = n >= kInterleavedTokens ? rows / 4 * 4 : 0;
  if (rows4 < rows) {
    matmul_tile<typename P::Kernel>(weights + rows4 * weight_row_bytes, weight_row_bytes, rows - rows4, activations,
                                    act_row_bytes, n, k, y + rows4, y_stride);
  }
  if (rows4 == 0) return;
  const int64_t steps = P::steps(k);
  // As many tokens as keep their activations in L2 (kernels_tile.h), at most kPackedTokens.
  int64_t block = kTokenBlockBytes / act_row_bytes;
  block = block < kInterleavedTokens ? kInterleavedTokens : block > kPackedTokens ? kPackedTokens : block;
  alignas(64) typename P::Block pack[P::kChunk];
  typename P::Acc acc[kPackedTokens];
  for (int64_t t0 = 0; t0 < n; t0 += block) {
    const int64_t nt = n - t0 < block ? n - t0 : block;
    const uint8_t* a0 = activations + t0 * act_row_bytes;
    for (int64_t r = 0; r < rows4; r += 4) {
      const uint8_t* w = weights + r * weight_row_bytes;
      for (int64_t s0 = 0; s0 < steps; s0 += P::kChunk) {
        const int64_t count = steps - s0 < P::kChunk ? steps - s0 : P::kChunk;
        for (int64_t s = 0; s < count; ++s) P::interleave(w, weight_row_bytes, s0 + s, k, pack[s]);
        const uint8_t* a = a0 + s0 * P::kActStepBytes;
        const bool first = s0 == 0;
        int64_t t = 0;
        for (; t + kInterleavedTokens <= nt; t += kInterleavedTokens) {
          interleaved_tile<P, kInterleavedTokens>(pack, count, a + t * act_row_bytes, act_row_bytes, first, acc + t);
        }
        switch (nt - t) {
          case 1: interleaved_tile<P, 1>(pack, count, a + t * act_row_bytes, act_row_bytes, first, acc + t); break;
          case 2: interleaved_tile<P, 2>(pack, count, a + t * act_row_bytes, act_row_bytes, first, acc + t); break;
          case 3: interleaved_tile<P, 3>(pack, count, a + t * act_row_bytes, act_row_bytes, first, acc + t); break;
          default: break;
        }
      }
      for (int64_t t = 0; t < nt; ++t) P::store(acc[t], y + (t0 + t) * y_stride + r);
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu
