// Quantizers of llama.cpp's 3-bit grid formats IQ3_XXS and IQ3_S (layouts in quant/blocks.h,
// grids in quant/iq3_grids.h). Not llama.cpp's algorithm bit for bit; this is the search:
//
//  1. Per value a weight w: 1 without an imatrix (the plain squared error), with one
//     importance * sqrt(sigma2 + x^2), sigma2 = twice the super-block's mean square (llama.cpp's
//     choice). Signs are the values' own signs; magnitudes |x| go on the grid.
//  2. Group assignment at a step delta: each group of 4 takes the grid entry nearest to
//     |x| / delta in the w-weighted squared distance, found exactly (nearest_entry: branch and
//     bound over the entries grouped by their first two coordinates; ties to the lower index).
//     IQ3_XXS stores 7 signs per 8 values, the eighth by even parity: when an 8-value half-group
//     has an odd number of negative values, the one sign flip (value target -|x| / delta) with the
//     least total error of the two groups is taken, each flip's groups re-assigned exactly.
//  3. Per 32-value sub-block, the step: candidates putting the largest magnitude at 0.6 .. 1.3 of
//     the largest grid value (15 of them), each assigned as in 2 and its step refitted by weighted
//     least squares; the best one is refitted once more.
//  4. Per super-block, the F16 d with the largest sub-block step on the top scale code 15, each
//     sub-block's code (d_j = d (2 s + 1) / 4 or d (2 s + 1)) the best of the nearest code and its
//     two neighbours, each assigned as in 2 at that stored step. So every group is the nearest
//     entry to its values at the step the block stores (tests/unit/quant_iq3_test.cpp checks it).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/iq3_grids.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

constexpr int kLevels = 8;  // values per coordinate in both grids

// A grid as level indices: entry e is (levels[lv[e][0]], ..., levels[lv[e][3]]).
struct Grid {
  float levels[kLevels] = {};
  std::vector<uint8_t> lv;                  // 4 per entry
  std::vector<uint16_t> by_prefix[kLevels * kLevels];  // entries by (lv 0, lv 1)

  Grid(const uint32_t* table, int size) : lv(size_t(size) * 4) {
    std::vector<int> values;
    for (int e = 0; e < size; ++e) {
      for (int i = 0; i < 4; ++i) values.push_back(int(table[e] >> (8 * i) & 0xff));
    }
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());  // the 8 levels
    for (int l = 0; l < kLevels; ++l) levels[l] = float(values[size_t(l)]);
    for (int e = 0; e < size; ++e) {
      for (int i = 0; i < 4; ++i) {
        const int v = int(table[e] >> (8 * i) & 0xff);
        lv[size_t(4 * e + i)] = uint8_t(std::lower_bound(values.begin(), values.end(), v) - values.begin());
      }
      by_prefix[lv[size_t(4 * e)] * kLevels + lv[size_t(4 * e + 1)]].push_back(uint16_t(e));
    }
  }
  float top() const { return levels[kLevels - 1]; }
};

const Grid& xxs_grid() {
  static const Grid grid(kIQ3XXSGrid, 256);
  return grid;
}
const Grid& s_grid() {
  static const Grid grid(kIQ3SGrid, 512);
  return grid;
}

struct Nearest {
  int entry = 0;
  float cost = 0.0f;
};

// The entry minimising sum_i w_i (t_i - level_i)^2 (ties: lowest index). Costs are summed in one
// order, ((c0 + c1) + c2) + c3, and a prefix's bound ((c0 + c1) + min c2) + min c3 is never above
// any of its entries' costs (float addition is monotone), so skipped prefixes cannot hold a better
// entry. A NaN target leaves entry 0.
Nearest nearest_entry(const Grid& g, const float* t, const float* w) {
  float cost[4][kLevels], low[4];
  for (int i = 0; i < 4; ++i) {
    low[i] = std::numeric_limits<float>::infinity();
    for (int l = 0; l < kLevels; ++l) {
      const float diff = t[i] - g.levels[l];
      cost[i][l] = w[i] * diff * diff;
      low[i] = std::min(low[i], cost[i][l]);
    }
  }
  Nearest best{-1, std::numeric_limits<float>::infinity()};
  auto scan = [&](int prefix) {
    const float head = cost[0][prefix / kLevels] + cost[1][prefix % kLevels];
    for (uint16_t e : g.by_prefix[prefix]) {
      const uint8_t* lv = &g.lv[size_t(4 * e)];
      const float c = head + cost[2][lv[2]] + cost[3][lv[3]];
      if (c < best.cost || (c == best.cost && int(e) < best.entry)) best = {int(e), c};
    }
  };
  const int first = int(std::min_element(cost[0], cost[0] + kLevels) - cost[0]) * kLevels +
                    int(std::min_element(cost[1], cost[1] + kLevels) - cost[1]);
  scan(first);
  for (int p = 0; p < kLevels * kLevels; ++p) {
    if (p != first && cost[0][p / kLevels] + cost[1][p % kLevels] + low[2] + low[3] <= best.cost) scan(p);
  }
  if (best.entry < 0) best = {0, std::numeric_limits<float>::infinity()};
  return best;
}

// One sub-block of 32 values assigned at one step: 8 grid entries and which values have the
// sign opposite to their own (IQ3_XXS parity), with the sums of the least-squares fit.
struct Assignment {
  int entry[8] = {};
  uint32_t flipped = 0;     // bit i: value i stored with the sign opposite to x_i's
  float sum_xq = 0.0f;      // sum w |x|' g  (|x|' = -|x| where flipped)
  float sum_q2 = 0.0f;      // sum w g^2
  float error(float step, float sum_x2) const { return sum_x2 - 2.0f * step * sum_xq + step * step * sum_q2; }
};

// Group k of a sub-block at inverse step `inverse`, value i's target negated if bit i of flips.
Nearest assign_group(const Grid& g, const float* a, const float* w, float inverse, int k, uint32_t flips) {
  float t[4];
  for (int i = 0; i < 4; ++i) {
    const int v = 4 * k + i;
    t[i] = (flips >> v & 1) != 0 ? -(a[v] * inverse) : a[v] * inverse;
  }
  return nearest_entry(g, t, w + 4 * k);
}

Assignment assign(const Grid& g, const float* x, const float* a, const float* w, float inverse, bool parity) {
  Assignment out;
  Nearest groups[8];
  for (int k = 0; k < 8; ++k) groups[k] = assign_group(g, a, w, inverse, k, 0);
  if (parity) {
    for (int half = 0; half < 4; ++half) {
      int negatives = 0;
      for (int i = 8 * half; i < 8 * half + 8; ++i) negatives += x[i] < 0.0f ? 1 : 0;
      if (negatives % 2 == 0) continue;
      // Flip candidates by a lower bound of their two groups' cost: the other values at their
      // own best level, the flipped one at its best level for a negative target (the lowest).
      float best_cost = std::numeric_limits<float>::infinity();
      int best_flip = 8 * half;
      Nearest best_group{};
      for (int i = 8 * half; i < 8 * half + 8; ++i) {
        const int k = i / 4, other = k ^ 1;
        const float t = -(a[i] * inverse) - g.levels[0];
        if (groups[other].cost + w[i] * t * t > best_cost) continue;
        const Nearest flipped = assign_group(g, a, w, inverse, k, 1u << i);
        const float total = flipped.cost + groups[other].cost;
        if (total < best_cost) {
          best_cost = total;
          best_flip = i;
          best_group = flipped;
        }
      }
      out.flipped |= 1u << best_flip;
      groups[best_flip / 4] = best_group;
    }
  }
  for (int k = 0; k < 8; ++k) {
    out.entry[k] = groups[k].entry;
    const uint8_t* lv = &g.lv[size_t(4 * groups[k].entry)];
    for (int i = 0; i < 4; ++i) {
      const int v = 4 * k + i;
      const float q = g.levels[lv[i]];
      const float xq = (out.flipped >> v & 1) != 0 ? -a[v] : a[v];
      out.sum_xq += w[v] * xq * q;
      out.sum_q2 += w[v] * q * q;
    }
  }
  return out;
}

// The sub-block's step (0 for a zero sub-block): step 3 of the header.
float best_step(const Grid& g, const float* x, const float* a, const float* w, bool parity) {
  const float amax = *std::max_element(a, a + 32);
  if (!(amax > 1e-30f)) return 0.0f;
  float best = 0.0f, best_gain = -1.0f;
  auto consider = [&](float inverse) {
    const Assignment s = assign(g, x, a, w, inverse, parity);
    if (s.sum_q2 <= 0.0f || s.sum_xq <= 0.0f) return;
    const float gain = s.sum_xq * s.sum_xq / s.sum_q2;  // the error is sum w x^2 - gain
    if (gain > best_gain) {
      best_gain = gain;
      best = s.sum_xq / s.sum_q2;
    }
  };
  for (int c = 0; c < 15; ++c) consider(g.top() * (0.6f + 0.05f * float(c)) / amax);
  if (best > 0.0f) consider(1.0f / best);
  return best;
}

// Per-value weights (step 1).
void fit_weights(const float* x, const float* importance, float* w) {
  if (importance == nullptr) {
    std::fill(w, w + kQK_K, 1.0f);
    return;
  }
  importance_weights(x, kQK_K, importance, w);
}

// A super-block: its F16 d, scale codes and each sub-block's assignment at its stored step
// d (2 s + 1) / divisor (divisor 4 for IQ3_XXS, 1 for IQ3_S).
struct SuperBlock {
  uint16_t d = 0;
  int code[8] = {};
  Assignment sub[8];
};

SuperBlock quantize_super_block(const Grid& g, const float* x, const float* importance, float divisor, bool parity) {
  float w[kQK_K], a[kQK_K];
  fit_weights(x, importance, w);
  for (int i = 0; i < kQK_K; ++i) a[i] = std::fabs(x[i]);
  float steps[8], max_step = 0.0f;
  for (int j = 0; j < 8; ++j) {
    steps[j] = best_step(g, x + 32 * j, a + 32 * j, w + 32 * j, parity);
    max_step = std::max(max_step, steps[j]);
  }
  SuperBlock out;
  out.d = float_to_fp16(max_step * divisor / 31.0f);
  const float d = fp16_to_float(out.d);
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    const float* aj = a + 32 * j;
    const float* wj = w + 32 * j;
    float sum_x2 = 0.0f;
    for (int i = 0; i < 32; ++i) sum_x2 += wj[i] * aj[i] * aj[i];
    const int nearest = d > 0.0f ? std::clamp(int(std::lround((steps[j] * divisor / d - 1.0f) / 2.0f)), 0, 15) : 0;
    float best_error = 0.0f;
    for (int code = std::max(0, nearest - 1); code <= std::min(15, nearest + 1); ++code) {
      const float step = d * float(2 * code + 1) / divisor;
      const Assignment s = assign(g, xj, aj, wj, step > 0.0f ? 1.0f / step : 0.0f, parity);
      const float error = s.error(step, sum_x2);
      if (code == std::max(0, nearest - 1) || error < best_error) {
        best_error = error;
        out.code[j] = code;
        out.sub[j] = s;
      }
    }
  }
  return out;
}

// The stored sign of value i: x_i's own (negative only if x_i < 0), inverted where flipped.
bool negative(const float* x, const Assignment& s, int i) { return (x[i] < 0.0f) != ((s.flipped >> i & 1) != 0); }

void quantize_iq3_xxs(const float* src, void* dst, int64_t n, const float* importance) {
  BlockIQ3_XXS* blocks = static_cast<BlockIQ3_XXS*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    const SuperBlock q = quantize_super_block(xxs_grid(), x, importance != nullptr ? importance + b * kQK_K : nullptr,
                                              4.0f, true);
    BlockIQ3_XXS& block = blocks[b];
    std::memset(&block, 0, sizeof block);
    block.d = q.d;
    for (int j = 0; j < 8; ++j) {
      uint32_t word = uint32_t(q.code[j]) << 28;
      for (int k = 0; k < 8; ++k) block.qs[8 * j + k] = uint8_t(q.sub[j].entry[k]);
      for (int half = 0; half < 4; ++half) {
        uint32_t signs = 0;  // even parity by construction: bit 7 is implied
        for (int i = 0; i < 7; ++i) signs |= uint32_t(negative(x + 32 * j, q.sub[j], 8 * half + i)) << i;
        word |= signs << (7 * half);
      }
      std::memcpy(block.signs_scales + 4 * j, &word, 4);
    }
  }
}

void quantize_iq3_s(const float* src, void* dst, int64_t n, const float* importance) {
  BlockIQ3_S* blocks = static_cast<BlockIQ3_S*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    const SuperBlock q =
        quantize_super_block(s_grid(), x, importance != nullptr ? importance + b * kQK_K : nullptr, 1.0f, false);
    BlockIQ3_S& block = blocks[b];
    std::memset(&block, 0, sizeof block);
    block.d = q.d;
    for (int j = 0; j < 8; ++j) {
      block.scales[j / 2] |= uint8_t(q.code[j] << (4 * (j % 2)));
      for (int k = 0; k < 8; ++k) {
        block.qs[8 * j + k] = uint8_t(q.sub[j].entry[k] & 0xff);
        block.qh[j] |= uint8_t((q.sub[j].entry[k] >> 8) << k);
      }
      for (int i = 0; i < 32; ++i) block.signs[4 * j + i / 8] |= uint8_t(negative(x + 32 * j, q.sub[j], i) << (i % 8));
    }
  }
}

}  // namespace

void quantize_row_iq3_xxs(const float* src, void* dst, int64_t n) { quantize_iq3_xxs(src, dst, n, nullptr); }
void quantize_row_iq3_xxs_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_iq3_xxs(src, dst, n, importance);
}
void quantize_row_iq3_s(const float* src, void* dst, int64_t n) { quantize_iq3_s(src, dst, n, nullptr); }
void quantize_row_iq3_s_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_iq3_s(src, dst, n, importance);
}

}  // namespace kestrel::quant::ref
