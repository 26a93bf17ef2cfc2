// Quantizers for the k-quant weight formats Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (layouts in quant/blocks.h).
//
// Each 256-value super-block is quantized in two levels: first every sub-block gets the scale (and
// for Q4_K/Q5_K the min) that minimises its weighted squared error (the weights: an imatrix's, or
// without one llama.cpp's defaults for the type), found by a small search; then those
// per-sub-block numbers are themselves quantized (6 bits against an F16 super-scale for Q4_K/Q5_K, 4 for Q2_K,
// int8 for Q6_K, signed 6 bits for Q3_K), trying the two nearest codes of each and keeping the one whose re-quantized
// values have the smaller error. Values are finally assigned to the nearest level of the grid the
// block actually stores, so dequantization sees exactly what the search chose.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {

void importance_weights(const float* x, int n, const float* importance, float* w) {
  float sigma2 = 0.0f;
  for (int i = 0; i < n; ++i) sigma2 += x[i] * x[i];
  sigma2 *= 2.0f / float(n);
  for (int i = 0; i < n; ++i) w[i] = importance[i] * std::sqrt(sigma2 + x[i] * x[i]);
}

namespace {

// ---------------------------------------------------------------------------------------------
// Level 1: one sub-block
//
// Candidate grids are searched side by side, one per vector lane: the number of levels the
// sub-block's range spans is stretched by -1 .. +0.875 in steps of 1/8 (so the extreme values land
// just inside or just past the end levels), every candidate's assignment is refitted by least
// squares, and the best refit is polished by one more assign-and-refit pass.

constexpr int kCandidates = 16;
constexpr float kStretchFirst = -1.0f;
constexpr float kStretchStep = 0.125f;
constexpr int kLanes = 8;  // interleaved partial sums: one vector register per sum

// round_nearest(v) clamped to [lo, hi], on ints. The loops below are written so GCC vectorizes
// them (checked with -fopt-info-vec): it turns a float std::clamp to [0, nmax] into vector min/max
// but not one to [-32, 31] (a compare that may trap blocks the if-conversion), while this integer
// clamp always vectorizes, so the Q6_K loops use it. |v| stays below a few hundred: v is a value
// divided by a step of its own sub-block, so the conversion is exact and in range (inputs must be
// finite; NaN or infinite weights have no k-quant representation).
inline float clamp_level(float v, int lo, int hi) {
  return float(std::min(std::max(int(round_nearest(v)), lo), hi));
}

template <int L>
float lane_total(const float (&lanes)[L]) {
  float total = 0.0f;
  for (float v : lanes) total += v;
  return total;
}

// x ~ scale * q - min with q in [0, nmax], min >= 0 (the formats subtract an unsigned min).
struct AffineFit {
  float scale = 0.0f;
  float min = 0.0f;
  double error = 0.0;
};

// Least-squares scale and offset (offset <= 0: the format can only subtract) for n values whose
// levels have sums sum_q, sum_qq (exact: integers below 2^24) and sum_qx; the error is
// sum (s q + o - x)^2 expanded, so it needs no second pass over x. Infinite if no scale fits.
AffineFit solve_affine(double n, double sum_x, double sum_xx, double sum_q, double sum_qq,
                       double sum_qx) {
  const double det = n * sum_qq - sum_q * sum_q;
  double scale = (n * sum_qx - sum_q * sum_x) / (det > 0.0 ? det : 1.0);
  double offset = (sum_qq * sum_x - sum_q * sum_qx) / (det > 0.0 ? det : 1.0);
  if (offset > 0.0) {
    offset = 0.0;
    scale = sum_qx / (sum_qq > 0.0 ? sum_qq : 1.0);
  }
  AffineFit fit;
  fit.scale = float(scale);
  fit.min = float(-offset);
  fit.error = det > 0.0 && scale > 0.0
                  ? sum_xx - 2.0 * scale * sum_qx - 2.0 * offset * sum_x + scale * scale * sum_qq +
                        2.0 * scale * offset * sum_q + n * offset * offset
                  : INFINITY;
  return fit;
}

// w: each value's weight (its squared error counts w[i] times; never null).
template <int N>
AffineFit search_affine(const float* x, int nmax, const float* w) {
  static_assert(N % kLanes == 0);
  float lo = 0.0f, hi = x[0];
  float lane_w[kLanes] = {}, lane_x[kLanes] = {}, lane_xx[kLanes] = {};
  for (int i = 0; i < N; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float wk = w[i + k];
      lo = std::min(lo, x[i + k]);
      hi = std::max(hi, x[i + k]);
      lane_w[k] += wk;
      lane_x[k] += wk * x[i + k];
      lane_xx[k] += wk * x[i + k] * x[i + k];
    }
  }
  AffineFit best;
  best.min = -lo;
  if (!(hi > lo)) return best;  // every value equals lo <= 0: the min alone represents it
  const double sum_x = lane_total(lane_x), sum_xx = lane_total(lane_xx);
  const double sum_w = double(lane_total(lane_w));
  const float top = float(nmax);

  float inverse[kCandidates], sum_q[kCandidates] = {}, sum_qq[kCandidates] = {},
        sum_qx[kCandidates] = {};
  for (int c = 0; c < kCandidates; ++c) {
    inverse[c] = (top + kStretchFirst + kStretchStep * float(c)) / (hi - lo);
  }
  for (int i = 0; i < N; ++i) {
    const float shifted = x[i] - lo;
    const float wi = w[i];
    for (int c = 0; c < kCandidates; ++c) {
      const float q = std::clamp(round_nearest(shifted * inverse[c]), 0.0f, top);
      sum_q[c] += wi * q;
      sum_qq[c] += wi * q * q;
      sum_qx[c] += wi * q * x[i];
    }
  }
  best.error = INFINITY;
  for (int c = 0; c < kCandidates; ++c) {
    const AffineFit fit = solve_affine(sum_w, sum_x, sum_xx, sum_q[c], sum_qq[c], sum_qx[c]);
    if (fit.error < best.error) best = fit;
  }
  if (!(best.error < INFINITY)) {  // cannot happen for hi > lo; keep the min/max grid regardless
    best.scale = (hi - lo) / top;
    best.min = -lo;
    return best;
  }
  // Polish: assign to the best grid and refit once more.
  const float inv = 1.0f / best.scale;
  float lane_q[kLanes] = {}, lane_qq[kLanes] = {}, lane_qx[kLanes] = {};
  for (int i = 0; i < N; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float q = std::clamp(round_nearest((x[i + k] + best.min) * inv), 0.0f, top);
      const float wk = w[i + k];
      lane_q[k] += wk * q;
      lane_qq[k] += wk * q * q;
      lane_qx[k] += wk * q * x[i + k];
    }
  }
  const AffineFit fit =
      solve_affine(sum_w, sum_x, sum_xx, lane_total(lane_q), lane_total(lane_qq), lane_total(lane_qx));
  if (fit.error < best.error) best = fit;
  return best;
}

// x ~ scale * q with q in [-H, H - 1] (Q6_K: H = 32, Q3_K: 4); the scale's sign is free, so the
// extreme value goes to the longer end, -H (give or take a level). Maximising (sum qx)^2 / sum qq
// minimises the error of the best scale for those levels.
template <int N, int H = 32>
float search_symmetric(const float* x, const float* w) {
  float extreme = 0.0f;
  for (int i = 0; i < N; ++i) {
    if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
  }
  if (extreme == 0.0f) return 0.0f;
  float inverse[kCandidates], sum_qq[kCandidates] = {}, sum_qx[kCandidates] = {};
  for (int c = 0; c < kCandidates; ++c) {
    inverse[c] = (-float(H) - kStretchFirst - kStretchStep * float(c)) / extreme;
  }
  for (int i = 0; i < N; ++i) {
    const float wi = w[i];
    for (int c = 0; c < kCandidates; ++c) {
      const float q = clamp_level(x[i] * inverse[c], -H, H - 1);
      sum_qq[c] += wi * q * q;
      sum_qx[c] += wi * q * x[i];
    }
  }
  float best_scale = extreme / -float(H);
  double best_score = -1.0;
  for (int c = 0; c < kCandidates; ++c) {
    if (sum_qq[c] <= 0.0f) continue;
    const double score = double(sum_qx[c]) * sum_qx[c] / sum_qq[c];
    if (score > best_score) best_score = score, best_scale = sum_qx[c] / sum_qq[c];
  }
  // Polish: assign to the best grid and refit once more.
  const float inv = 1.0f / best_scale;
  float lane_qq[kLanes] = {}, lane_qx[kLanes] = {};
  for (int i = 0; i < N; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float q = clamp_level(x[i + k] * inv, -H, H - 1);
      const float wk = w[i + k];
      lane_qq[k] += wk * q * q;
      lane_qx[k] += wk * q * x[i + k];
    }
  }
  const float qq = lane_total(lane_qq), qx = lane_total(lane_qx);
  if (qq > 0.0f && double(qx) * qx / qq > best_score) best_scale = qx / qq;
  return best_scale;
}

// ---------------------------------------------------------------------------------------------
// Level 2: quantize the sub-block scales, then the values against the stored grid

// Squared error of sub-block x on the grid value = step * q - min, values assigned to the nearest
// level; writes the levels.
template <int N>
float assign_affine(const float* x, int nmax, float step, float min, uint8_t* levels, const float* w) {
  const float inverse = step > 0.0f ? 1.0f / step : 0.0f;
  float q[N];
  for (int i = 0; i < N; ++i) {
    q[i] = std::clamp(round_nearest((x[i] + min) * inverse), 0.0f, float(nmax));
  }
  float lanes[kLanes] = {};
  for (int i = 0; i < N; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float e = step * q[i + k] - min - x[i + k];
      lanes[k] += w[i + k] * e * e;
    }
  }
  for (int i = 0; i < N; ++i) levels[i] = uint8_t(q[i]);
  return lane_total(lanes);
}

// As assign_affine for the grid value = step * (q - H), q in [0, 2H - 1].
template <int N, int H = 32>
float assign_symmetric(const float* x, float step, uint8_t* levels, const float* w) {
  const float inverse = step != 0.0f ? 1.0f / step : 0.0f;
  float q[N];
  for (int i = 0; i < N; ++i) q[i] = clamp_level(x[i] * inverse, -H, H - 1);
  float lanes[kLanes] = {};
  for (int i = 0; i < N; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float e = step * q[i + k] - x[i + k];
      lanes[k] += w[i + k] * e * e;
    }
  }
  for (int i = 0; i < N; ++i) levels[i] = uint8_t(int(q[i]) + H);
  return lane_total(lanes);
}

// The two codes around value / unit, clamped to [lo, hi] (one code when they coincide).
int neighbour_codes(float value, float unit, int lo, int hi, int codes[2]) {
  if (unit == 0.0f) {
    codes[0] = 0;
    return 1;
  }
  const int below = std::clamp(int(std::floor(value / unit)), lo, hi);
  const int above = std::clamp(below + 1, lo, hi);
  codes[0] = below;
  codes[1] = above;
  return above == below ? 1 : 2;
}

// The code c in [lo, hi] (one of the two around scale / d) whose grid step d * c gives sub-block x
// the lower error; the levels (q + H) of that grid go to `levels`.
template <int N, int H>
int best_symmetric_code(const float* x, float scale, float d, int lo, int hi, uint8_t* levels, const float* w,
                        float* error = nullptr) {
  int codes[2];
  const int n_codes = neighbour_codes(scale, d, lo, hi, codes);
  float best = INFINITY;
  int chosen = codes[0];
  for (int c = 0; c < n_codes; ++c) {
    uint8_t trial[N];
    const float error = assign_symmetric<N, H>(x, d * float(codes[c]), trial, w);
    if (error < best) {
      best = error;
      chosen = codes[c];
      std::memcpy(levels, trial, N);
    }
  }
  if (error != nullptr) *error = best;
  return chosen;
}

// Packs the eight 6-bit scales and mins of a Q4_K/Q5_K block (inverse of kquant_scale_min).
void pack_scale_min(const uint8_t scale[8], const uint8_t min[8], uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = uint8_t(scale[j] | (scale[j + 4] >> 4) << 6);
    packed[j + 4] = uint8_t(min[j] | (min[j + 4] >> 4) << 6);
    packed[j + 8] = uint8_t((scale[j + 4] & 0x0f) | (min[j + 4] & 0x0f) << 4);
  }
}

// Shared by Q4_K (nmax 15, 8 sub-blocks of 32, 6-bit codes), Q5_K (nmax 31) and Q2_K (nmax 3, 16
// sub-blocks of 16, 4-bit codes): fills d, dmin, each sub-block's scale and min code and the 256
// levels of one super-block; w holds the 256 values' weights.
template <int kSub, int kCodeMax>
void quantize_affine_superblock(const float* x, int nmax, uint16_t* d_bits, uint16_t* dmin_bits,
                                uint8_t scale_codes[kQK_K / kSub], uint8_t min_codes[kQK_K / kSub],
                                uint8_t levels[kQK_K], const float* w) {
  AffineFit fits[kQK_K / kSub];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < kQK_K / kSub; ++j) {
    fits[j] = search_affine<kSub>(x + j * kSub, nmax, w + j * kSub);
    max_scale = std::max(max_scale, fits[j].scale);
    max_min = std::max(max_min, fits[j].min);
  }
  *d_bits = float_to_fp16(max_scale / float(kCodeMax));
  *dmin_bits = float_to_fp16(max_min / float(kCodeMax));
  const float d = fp16_to_float(*d_bits);
  const float dmin = fp16_to_float(*dmin_bits);

  for (int j = 0; j < kQK_K / kSub; ++j) {
    int sc[2], mc[2];
    const int n_sc = neighbour_codes(fits[j].scale, d, 0, kCodeMax, sc);
    const int n_mc = neighbour_codes(fits[j].min, dmin, 0, kCodeMax, mc);
    float best = INFINITY;
    uint8_t trial[kSub];
    for (int a = 0; a < n_sc; ++a) {
      for (int b = 0; b < n_mc; ++b) {
        const float error = assign_affine<kSub>(x + j * kSub, nmax, d * float(sc[a]), dmin * float(mc[b]),
                                                          trial, w + j * kSub);
        if (error < best) {
          best = error;
          scale_codes[j] = uint8_t(sc[a]);
          min_codes[j] = uint8_t(mc[b]);
          std::memcpy(levels + j * kSub, trial, kSub);
        }
      }
    }
  }
}

// Q4_K/Q5_K: the 6-bit codes of the 8 sub-blocks of 32, packed as the formats store them.
void quantize_q45_superblock(const float* x, int nmax, uint16_t* d_bits, uint16_t* dmin_bits,
                             uint8_t* packed_scales, uint8_t levels[kQK_K], const float* w) {
  uint8_t scale_codes[8], min_codes[8];
  quantize_affine_superblock<32, 63>(x, nmax, d_bits, dmin_bits, scale_codes, min_codes, levels, w);
  pack_scale_min(scale_codes, min_codes, packed_scales);
}

// Q4_K/Q5_K importance weights as llama.cpp's imatrix quantizers form them: the channel's
// importance times sqrt(sigma^2 + x^2), sigma^2 twice the super-block's mean square, so large
// weights of an important channel count most.
void affine_weights(const float* x, const float* importance, float w[kQK_K]) {
  importance_weights(x, kQK_K, importance, w);
}

// Q4_K/Q5_K weights: with an imatrix, affine_weights; without, as llama.cpp's
// quantize_row_q4_K_ref/q5_K_ref form them: per sub-block of 32, the sub-block's RMS plus |x|, so
// the large weights keep a finer fit at a small cost in plain squared error (on
// Qwen2.5-Coder-1.5B's Q3_K_M, whose attn_v/ffn_down are Q4_K/Q5_K, the unweighted fit cost about
// 2% in KL divergence; docs/QUANTIZATION.md).
void q45_weights(const float* x, const float* importance, float w[kQK_K]) {
  if (importance != nullptr) {
    affine_weights(x, importance, w);
    return;
  }
  for (int j = 0; j < kQK_K; j += 32) {
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += x[j + l] * x[j + l];
    const float rms = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) w[j + l] = rms + std::fabs(x[j + l]);
  }
}

// importance: the imatrix, or null (llama.cpp's default weights).
void quantize_row_q4_K_impl(const float* src, void* dst, int64_t n, const float* importance) {
  BlockQ4_K* blocks = static_cast<BlockQ4_K*>(dst);
  uint8_t levels[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ4_K& block = blocks[b];
    float w[kQK_K];
    q45_weights(src + b * kQK_K, importance != nullptr ? importance + b * kQK_K : nullptr, w);
    quantize_q45_superblock(src + b * kQK_K, 15, &block.d, &block.dmin, block.scales, levels, w);
    pack_q4k_levels(levels, block);
  }
}

// importance: the imatrix, or null (llama.cpp's default weights).
void quantize_row_q5_K_impl(const float* src, void* dst, int64_t n, const float* importance) {
  BlockQ5_K* blocks = static_cast<BlockQ5_K*>(dst);
  uint8_t levels[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ5_K& block = blocks[b];
    float w[kQK_K];
    q45_weights(src + b * kQK_K, importance != nullptr ? importance + b * kQK_K : nullptr, w);
    quantize_q45_superblock(src + b * kQK_K, 31, &block.d, &block.dmin, block.scales, levels, w);
    pack_q5k_levels(levels, block);
  }
}

// importance: the imatrix (the weights themselves, as llama.cpp's quantize_q6_K_impl takes it), or
// null: x^2, as its quantize_row_q6_K_ref (make_qx_quants' rmse_type 1) weighs the values.
void quantize_row_q6_K_impl(const float* src, void* dst, int64_t n, const float* importance) {
  constexpr int kSub = 16;
  BlockQ6_K* blocks = static_cast<BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ6_K& block = blocks[b];
    float w[kQK_K];
    if (importance == nullptr) {
      for (int i = 0; i < kQK_K; ++i) w[i] = x[i] * x[i];
    } else {
      std::copy_n(importance + b * kQK_K, kQK_K, w);
    }
    float scales[kQK_K / kSub];
    float max_abs = 0.0f;
    for (int j = 0; j < kQK_K / kSub; ++j) {
      scales[j] = search_symmetric<kSub>(x + j * kSub, w + j * kSub);
      max_abs = std::max(max_abs, std::fabs(scales[j]));
    }
    // The largest sub-block scale at code 127. (Q3_K's search over a few super-block scales, tried
    // here too, lowered the weighted error but not the model's: Qwen2.5-Coder-1.5B's imatrix Q4_K_M,
    // whose 28 attn_v/ffn_down Q6_K tensors it changed, measured mean KLD 2.5% higher.)
    block.d = float_to_fp16(max_abs / 127.0f);
    const float d = fp16_to_float(block.d);

    uint8_t levels[kQK_K];  // q + 32, in [0, 63]
    for (int j = 0; j < kQK_K / kSub; ++j) {
      block.scales[j] = int8_t(best_symmetric_code<kSub, 32>(x + j * kSub, scales[j], d, -128, 127,
                                                                  levels + j * kSub, w + j * kSub));
    }
    pack_q6k_levels(levels, block);
  }
}

// Q3_K: as Q6_K with levels in [-4, 3] and 6-bit signed sub-block scales: the sub-block scale of
// largest magnitude takes code -32, so d = that scale / -32 and every other scale lies within
// [-32, 32] d (codes clamped to 31 above).
// importance: the imatrix, or null.
void quantize_row_q3_K_impl(const float* src, void* dst, int64_t n, const float* importance) {
  constexpr int kSub = 16;
  BlockQ3_K* blocks = static_cast<BlockQ3_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ3_K& block = blocks[b];
    // llama.cpp's Q3_K weights: with an imatrix, importance x sqrt(sigma^2 + x^2), sigma^2 twice the
    // mean square; without, x^2 (its quantize_row_q3_K_ref's rmse weighting), which costs a little
    // plain squared error but keeps large weights closer: on Qwen2.5-Coder-1.5B's Q3_K_M, KLD
    // 0.095 with uniform weights vs 0.078 for llama.cpp's file.
    float w[kQK_K];
    if (importance == nullptr) {
      for (int i = 0; i < kQK_K; ++i) w[i] = x[i] * x[i];
    } else {
      affine_weights(x, importance + b * kQK_K, w);
    }
    float scales[kQK_K / kSub];
    float extreme = 0.0f;
    for (int j = 0; j < kQK_K / kSub; ++j) {
      scales[j] = search_symmetric<kSub, 4>(x + j * kSub, w + j * kSub);
      if (std::fabs(scales[j]) > std::fabs(extreme)) extreme = scales[j];
    }
    // The super-block scale: the largest sub-block scale at code -32, or a little further in (it
    // then rounds to -32 or -31 while the others get finer codes): the candidate with the lowest
    // weighted error of the whole super-block.
    uint16_t best_d = float_to_fp16(extreme / -32.0f);
    float best_error = INFINITY;
    for (const float divisor : {32.0f, 31.75f, 31.5f, 31.25f, 31.0f, 30.5f, 30.0f}) {
      const uint16_t d_bits = float_to_fp16(extreme / -divisor);
      const float d_try = fp16_to_float(d_bits);
      float total = 0.0f;
      for (int j = 0; j < kQK_K / kSub && total < best_error; ++j) {
        uint8_t trial[kSub];
        float e = 0.0f;
        (void)best_symmetric_code<kSub, 4>(x + j * kSub, scales[j], d_try, -32, 31, trial, w + j * kSub, &e);
        total += e;
      }
      if (total < best_error) best_error = total, best_d = d_bits;
    }
    block.d = best_d;
    const float d = fp16_to_float(block.d);

    uint8_t levels[kQK_K];  // q + 4, in [0, 7]
    std::memset(block.scales, 0, sizeof block.scales);
    for (int j = 0; j < kQK_K / kSub; ++j) {
      const int chosen = best_symmetric_code<kSub, 4>(x + j * kSub, scales[j], d, -32, 31, levels + j * kSub,
                                                            w + j * kSub) + 32;
      block.scales[j % 8] |= uint8_t((chosen & 0x0f) << (j < 8 ? 0 : 4));
      block.scales[8 + j % 4] |= uint8_t((chosen >> 4) << (2 * (j / 4)));
    }
    pack_q3k_levels(levels, block);
  }
}

// Q2_K: as Q4_K with levels in [0, 3] and 16 sub-blocks of 16 whose scales and mins take 4-bit
// codes. Weights as llama.cpp's Q2_K quantizers use them: with an imatrix, importance x
// sqrt(sigma^2 + x^2) (affine_weights); without, |x|, so at two bits the large weights, which the
// model depends on most, keep the finer fit.
void quantize_row_q2_K_impl(const float* src, void* dst, int64_t n, const float* importance) {
  BlockQ2_K* blocks = static_cast<BlockQ2_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ2_K& block = blocks[b];
    float w[kQK_K];
    if (importance == nullptr) {
      for (int i = 0; i < kQK_K; ++i) w[i] = std::fabs(x[i]);
    } else {
      affine_weights(x, importance + b * kQK_K, w);
    }
    uint8_t scale_codes[16], min_codes[16], levels[kQK_K];
    quantize_affine_superblock<16, 15>(x, 3, &block.d, &block.dmin, scale_codes, min_codes, levels, w);
    for (int j = 0; j < 16; ++j) block.scales[j] = uint8_t(scale_codes[j] | min_codes[j] << 4);
    pack_q2k_levels(levels, block);
  }
}

}  // namespace

void quantize_row_q4_K(const float* src, void* dst, int64_t n) { quantize_row_q4_K_impl(src, dst, n, nullptr); }
void quantize_row_q5_K(const float* src, void* dst, int64_t n) { quantize_row_q5_K_impl(src, dst, n, nullptr); }
void quantize_row_q6_K(const float* src, void* dst, int64_t n) { quantize_row_q6_K_impl(src, dst, n, nullptr); }
void quantize_row_q3_K(const float* src, void* dst, int64_t n) { quantize_row_q3_K_impl(src, dst, n, nullptr); }
void quantize_row_q2_K(const float* src, void* dst, int64_t n) { quantize_row_q2_K_impl(src, dst, n, nullptr); }
void quantize_row_q4_K_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row_q4_K_impl(src, dst, n, importance);
}
void quantize_row_q5_K_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row_q5_K_impl(src, dst, n, importance);
}
void quantize_row_q6_K_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row_q6_K_impl(src, dst, n, importance);
}
void quantize_row_q3_K_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row_q3_K_impl(src, dst, n, importance);
}
void quantize_row_q2_K_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row_q2_K_impl(src, dst, n, importance);
}

}  // namespace kestrel::quant::ref
