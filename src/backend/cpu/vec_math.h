// AVX2 float math for the AVX2 attention and activation kernels (attention_kernels_avx2.cpp, the
// only includer): exp, attention's shifted exp with its sum, and the gated-MLP activations SiLU and
// GELU-tanh, 8 lanes at a time. Every element goes through the same 8-lane code, tails included
// (through a padded copy), so an element's value never depends on its position in a row or on the
// batch: what keeps batching exact (kernels.h). The scalar table has its own plain loops
// (attention_kernels_scalar.cpp), so KESTREL_ISA=scalar runs none of this.
// Internal linkage, as in kernels_tile.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kestrel::cpu {
namespace {

// e^x, relative error below 2e-7 (a few ulp) for x in [-87, 88]; inputs outside are clamped to
// that range (e^x then underflows to ~1e-38 or saturates at ~1.6e38, never inf), NaN stays NaN.
// x = n ln2 + r with |r| <= ln2/2; e^r by its degree-7 Taylor polynomial (truncation error
// r^8/8! < 6e-9); 2^n built in the exponent bits.
inline __m256 exp8(__m256 x) {
  // max/min return their second operand when one is NaN: x second keeps a NaN.
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split in two so n * ln2_hi is exact for |n| <= 128.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n in [-126, 127]: 2^n is a normal float.
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// The sum of v's 8 lanes as ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7)): the
// order attention's reduce4 gives every lane, so a key's score does not depend on its neighbours.
inline float hsum_tree(__m256 v) {
  const __m256 pairs = _mm256_hadd_ps(v, v);
  const __m256 quads = _mm256_hadd_ps(pairs, pairs);
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1)));
}

// x[i] = exp(x[i] - shift) for i < count; returns their sum, 8 lanes at a time, then hsum_tree
// (a serial sum would be a chain of dependent adds as long as the block).
inline float exp_shifted_sum(float* x, float shift, int count) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (i < count) {
    alignas(32) float tail[8] = {};
    for (int j = 0; j < count - i; ++j) tail[j] = x[i + j];
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(count - i), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_load_ps(tail), s)), _mm256_castsi256_ps(lanes));
    _mm256_store_ps(tail, e);
    for (int j = 0; j < count - i; ++j) x[i + j] = tail[j];
    sum = _mm256_add_ps(sum, e);
  }
  return hsum_tree(sum);
}

enum class GateKind { Silu, GeluTanh };

// act(g) * u for 8 lanes. SiLU: g * sigmoid(g). GELU-tanh: 0.5 g (1 + tanh(c (g + 0.044715 g^3)))
// = g * sigmoid(2c (g + 0.044715 g^3)), c = sqrt(2 / pi), which needs one exp and no cancellation.
template <GateKind kKind>
inline __m256 gated8(__m256 g, __m256 u) {
  __m256 z = g;
  if constexpr (kKind == GateKind::GeluTanh) {
    const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    z = _mm256_mul_ps(_mm256_set1_ps(2.0f * 0.7978845608028654f),
                      _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g));
  }
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), z));  // e^-z
  const __m256 sigmoid = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), u);
}

// out[i] = act(gate[i]) * up[i] for i < count; out may alias gate or up.
template <GateKind kKind>
inline void gated_activation(const float* gate, const float* up, int64_t count, float* out) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(out + i, gated8<kKind>(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i == count) return;
  alignas(32) float g[8] = {}, u[8] = {}, o[8];
  const int64_t rest = count - i;
  for (int64_t j = 0; j < rest; ++j) {
    g[j] = gate[i + j];
    u[j] = up[i + j];
  }
  _mm256_store_ps(o, gated8<kKind>(_mm256_load_ps(g), _mm256_load_ps(u)));
  for (int64_t j = 0; j < rest; ++j) out[i + j] = o[j];
}

}  // namespace
}  // namespace kestrel::cpu
