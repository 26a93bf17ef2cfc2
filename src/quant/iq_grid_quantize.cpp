// Quantizers of llama.cpp's 2-bit and 1-bit grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M
// (layouts and grids in quant/iq_grids.h). Each group of 8 values is one entry of a fixed grid of
// 3-level vectors; llama.cpp requires an importance matrix for these types and so does
// `kestrel quantize` (the unweighted entry points serve the tests). Not llama.cpp's algorithm bit
// for bit; the search is iq3_quantize.cpp's, for groups of 8:
//
//  1. Per value a weight w: 1 without an imatrix, with one importance * sqrt(sigma2 + x^2)
//     (importance_weights). IQ2 puts magnitudes |x| on its grid (levels 8, 25, 43) and keeps the
//     values' own signs; IQ1's grid is signed (levels -1, 0, 1) and shifted by a delta of +-1/8.
//  2. Group assignment at a step: each group of 8 takes the entry nearest to its targets (|x| / step
//     for IQ2, x / step - delta for IQ1) in the w-weighted squared distance, found exactly
//     (nearest_entry: an entry's cost is its first four levels' cost plus its last four's; prefixes
//     whose bound cannot beat the best are skipped; ties to the lower index). IQ2_XXS and IQ2_XS
//     store 7 signs per 8 values, the eighth by even parity: a group with an odd number of negative
//     values takes the one sign flip with the least error, each flip re-assigned exactly. IQ1's
//     delta sign is chosen per 32 values (IQ1_S) or per group (IQ1_M) by the lower error.
//  3. Per scale block (32 values: IQ2_XXS, IQ1_S; 16: the others), the step: 16 candidates putting
//     the largest magnitude at a spread of fractions of the grid's top value, each assigned as in 2
//     and refitted by weighted least squares; the best one is refitted once more. IQ1 then takes
//     the step that keeps the block's weighted norm for that assignment (see best_step).
//  4. Per super-block of 256, the F16 d that puts the largest step on the top scale code, and each
//     block's code the best of the nearest code and its two neighbours (IQ1: the nearest), each
//     assigned as in 2 at that stored step. So every group is the nearest entry at the step the block stores
//     (tests/unit/quant_iq_grid_test.cpp checks it by brute force).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "quant/iq_grids.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

constexpr int kGroup = 8;
constexpr float kInf = std::numeric_limits<float>::infinity();

// A grid as 2-bit level codes (iq_grids_data.h: element j's code at bits 2j, 2j + 1), its entries
// ordered by their first four codes (the prefix, the low byte) so that a search prices each
// prefix once.
struct Grid {
  float levels[3] = {};
  struct Prefix {
    uint8_t pair01, pair23;  // indices (3 a + b) of the two pairs' level codes
    uint16_t begin, end;     // its entries in `suffix` / `entry`
  };
  std::vector<Prefix> prefixes;
  std::vector<uint8_t> suffix;   // per entry (prefix order): index into suffixes
  std::vector<uint16_t> entry;   // per entry (prefix order): the grid index
  std::vector<uint8_t> suffix_pairs;  // per distinct suffix: pair45 * 9 + pair67
  const uint16_t* codes;              // by grid index

  template <size_t N>
  Grid(const uint16_t (&table)[N], float l0, float l1, float l2) : levels{l0, l1, l2}, codes(table) {
    auto pairs = [](int byte) { return std::pair{3 * (byte & 3) + (byte >> 2 & 3), 3 * (byte >> 4 & 3) + (byte >> 6 & 3)}; };
    for (size_t e = 0; e < N; ++e) {  // 2-bit codes 0..2 only: at most 81 prefixes and suffixes
      for (int j = 0; j < kGroup; ++j) {
        if ((table[e] >> (2 * j) & 3) == 3) fail("IQ grid entry {} has an invalid level code", e);
      }
    }
    std::vector<int> suffix_index(256, -1);
    for (int p = 0; p < 256; ++p) {
      const size_t begin = entry.size();
      for (size_t e = 0; e < N; ++e) {
        if ((table[e] & 0xff) != p) continue;
        const int s = table[e] >> 8;
        if (suffix_index[size_t(s)] < 0) {
          suffix_index[size_t(s)] = int(suffix_pairs.size());
          suffix_pairs.push_back(uint8_t(pairs(s).first * 9 + pairs(s).second));
        }
        suffix.push_back(uint8_t(suffix_index[size_t(s)]));
        entry.push_back(uint16_t(e));
      }
      if (entry.size() > begin) {
        prefixes.push_back({uint8_t(pairs(p).first), uint8_t(pairs(p).second), uint16_t(begin), uint16_t(entry.size())});
      }
    }
  }
  float top() const { return std::max(std::fabs(levels[0]), std::fabs(levels[2])); }
  float level(int e, int j) const { return levels[codes[e] >> (2 * j) & 3]; }
};

struct Nearest {
  int entry = 0;
  float cost = kInf;
};

// The entry minimising sum_i w_i (t_i - level_i)^2 (ties: the lower index). An entry's cost is
// summed in one order, ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)); a prefix's bound (its
// cost plus the cheapest suffix's) is never above any of its entries' costs (float addition is
// monotone), so a skipped prefix cannot hold a better entry. A NaN target leaves entry 0.
Nearest nearest_entry(const Grid& g, const float* t, const float* w) {
  float cost[kGroup][3];
  for (int i = 0; i < kGroup; ++i) {
    for (int l = 0; l < 3; ++l) {
      const float diff = t[i] - g.levels[l];
      cost[i][l] = w[i] * diff * diff;
    }
  }
  float pair[4][9];
  for (int k = 0; k < 4; ++k) {
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 3; ++b) pair[k][3 * a + b] = cost[2 * k][a] + cost[2 * k + 1][b];
    }
  }
  float suffix_cost[81];
  float cheapest_suffix = kInf;
  for (size_t s = 0; s < g.suffix_pairs.size(); ++s) {
    suffix_cost[s] = pair[2][g.suffix_pairs[s] / 9] + pair[3][g.suffix_pairs[s] % 9];
    cheapest_suffix = std::min(cheapest_suffix, suffix_cost[s]);
  }
  float prefix_cost[81];
  size_t first = 0;
  float first_cost = kInf;  // kept in a register: no load of prefix_cost[first] per step
  for (size_t p = 0; p < g.prefixes.size(); ++p) {
    prefix_cost[p] = pair[0][g.prefixes[p].pair01] + pair[1][g.prefixes[p].pair23];
    if (prefix_cost[p] < first_cost) {
      first_cost = prefix_cost[p];
      first = p;
    }
  }
  Nearest best{-1, kInf};
  auto scan = [&](size_t p) {
    for (int k = g.prefixes[p].begin; k < g.prefixes[p].end; ++k) {
      const float c = prefix_cost[p] + suffix_cost[g.suffix[size_t(k)]];
      const int e = g.entry[size_t(k)];
      if (c < best.cost || (c == best.cost && e < best.entry)) best = {e, c};
    }
  };
  scan(first);
  for (size_t p = 0; p < g.prefixes.size(); ++p) {
    if (p != first && prefix_cost[p] + cheapest_suffix <= best.cost) scan(p);
  }
  if (best.entry < 0) best = {0, kInf};
  return best;
}

// What a format stores besides its grid: IQ2 magnitudes with signs (7 per group and even parity,
// or 8 free), IQ1 signed values with a delta sign per 32 values or per group of 8.
enum class Kind { Iq2ParitySigns, Iq2FreeSigns, Iq1DeltaPerBlock, Iq1DeltaPerGroup };

struct Spec {
  const Grid& grid;
  int block;     // values per scale code: 32 or 16
  Kind kind;
  int max_code;  // 15 (IQ2) or 7 (IQ1)
  bool iq1() const { return kind == Kind::Iq1DeltaPerBlock || kind == Kind::Iq1DeltaPerGroup; }
  // The step a code stores, computed as the dequantizer computes it.
  float step(float d, int code) const { return iq1() ? d * float(2 * code + 1) : d * (0.5f + float(code)) * 0.25f; }
  // d such that the top code's step is `step` (before rounding to F16).
  float d_for_top(float step) const { return iq1() ? step / float(2 * max_code + 1) : step * 8.0f / float(2 * max_code + 1); }
};

// One scale block assigned at one step: per group its entry, the values stored with the sign
// opposite to their own (IQ2 parity), its delta sign (IQ1), with the least-squares sums.
struct Assignment {
  int entry[4] = {};
  uint8_t flipped[4] = {};  // bit i: value i of the group stored with the sign opposite to x_i's
  bool negative_delta[4] = {};
  float sum_xq = 0.0f;  // sum w x q (q the stored value over the step)
  float sum_q2 = 0.0f;  // sum w q^2
  float error(float step, float sum_x2) const { return sum_x2 - 2.0f * step * sum_xq + step * step * sum_q2; }
};

// IQ2: the group's magnitudes at inverse step `inverse`, value i negated where bit i of flips.
Nearest iq2_group(const Grid& g, const float* a, const float* w, float inverse, uint8_t flips) {
  float t[kGroup];
  for (int i = 0; i < kGroup; ++i) t[i] = (flips >> i & 1) != 0 ? -(a[i] * inverse) : a[i] * inverse;
  return nearest_entry(g, t, w);
}

// IQ1: the group's values at inverse step `inverse` less the delta.
Nearest iq1_group(const Grid& g, const float* x, const float* w, float inverse, float delta) {
  float t[kGroup];
  for (int i = 0; i < kGroup; ++i) t[i] = x[i] * inverse - delta;
  return nearest_entry(g, t, w);
}

// IQ2 group with even sign parity: with an odd number of negative values, the best single flip.
// A flip's lower bound is the flipped value at the lowest level plus the others at their best.
Nearest iq2_parity_group(const Grid& g, const float* x, const float* a, const float* w, float inverse,
                         uint8_t* flipped) {
  *flipped = 0;
  int negatives = 0;
  for (int i = 0; i < kGroup; ++i) negatives += x[i] < 0.0f ? 1 : 0;
  if (negatives % 2 == 0) return iq2_group(g, a, w, inverse, 0);
  float own_best[kGroup], others = 0.0f;
  for (int i = 0; i < kGroup; ++i) {
    own_best[i] = kInf;
    for (float level : g.levels) {
      const float diff = a[i] * inverse - level;
      own_best[i] = std::min(own_best[i], w[i] * diff * diff);
    }
    others += own_best[i];
  }
  Nearest best{0, kInf};
  for (int i = 0; i < kGroup; ++i) {
    const float diff = -(a[i] * inverse) - g.levels[0];
    if (others - own_best[i] + w[i] * diff * diff > best.cost) continue;
    const Nearest n = iq2_group(g, a, w, inverse, uint8_t(1u << i));
    if (n.cost < best.cost) {
      best = n;
      *flipped = uint8_t(1u << i);
    }
  }
  return best;
}

Assignment assign(const Spec& s, const float* x, const float* a, const float* w, float inverse) {
  Assignment out;
  const int groups = s.block / kGroup;
  if (s.iq1()) {
    // Both delta signs per group; per block, the sign with the lower total.
    Nearest by_delta[2][4];
    float total[2] = {0.0f, 0.0f};
    for (int k = 0; k < groups; ++k) {
      for (int neg = 0; neg < 2; ++neg) {
        by_delta[neg][k] = iq1_group(s.grid, x + kGroup * k, w + kGroup * k, inverse, neg ? -kIQ1Delta : kIQ1Delta);
        total[neg] += by_delta[neg][k].cost;
      }
    }
    const bool block_negative = total[1] < total[0];
    for (int k = 0; k < groups; ++k) {
      const bool neg = s.kind == Kind::Iq1DeltaPerGroup ? by_delta[1][k].cost < by_delta[0][k].cost : block_negative;
      out.entry[k] = by_delta[neg][k].entry;
      out.negative_delta[k] = neg;
    }
  } else {
    for (int k = 0; k < groups; ++k) {
      const Nearest n = s.kind == Kind::Iq2ParitySigns
                            ? iq2_parity_group(s.grid, x + kGroup * k, a + kGroup * k, w + kGroup * k, inverse, &out.flipped[k])
                            : iq2_group(s.grid, a + kGroup * k, w + kGroup * k, inverse, 0);
      out.entry[k] = n.entry;
    }
  }
  for (int k = 0; k < groups; ++k) {
    for (int i = 0; i < kGroup; ++i) {
      const int v = kGroup * k + i;
      float q, xq;
      if (s.iq1()) {
        q = s.grid.level(out.entry[k], i) + (out.negative_delta[k] ? -kIQ1Delta : kIQ1Delta);
        xq = x[v] * q;
      } else {
        q = s.grid.level(out.entry[k], i);
        xq = (out.flipped[k] >> i & 1) != 0 ? -(a[v] * q) : a[v] * q;
      }
      out.sum_xq += w[v] * xq;
      out.sum_q2 += w[v] * q * q;
    }
  }
  return out;
}

// The block's step (0 for a zero block): step 3 of the header. sum_x2 = sum w x^2 over the block.
float best_step(const Spec& s, const float* x, const float* a, const float* w, float sum_x2) {
  const float amax = *std::max_element(a, a + s.block);
  if (!(amax > 1e-30f)) return 0.0f;
  // Where the largest magnitude lands, as a fraction of the grid's top value: IQ2's three levels
  // (8, 25, 43) rarely want it far past the top, IQ1's (-1, 0, 1) often do (the rest near 0 or 1).
  const float low = s.iq1() ? 0.6f : 0.55f, high = s.iq1() ? 2.1f : 1.3f;
  float best = 0.0f, best_gain = -1.0f;
  auto consider = [&](float inverse) {
    const Assignment q = assign(s, x, a, w, inverse);
    if (q.sum_q2 <= 0.0f || q.sum_xq <= 0.0f) return;
    const float gain = q.sum_xq * q.sum_xq / q.sum_q2;  // the error is sum w x^2 - gain
    if (gain > best_gain) {
      best_gain = gain;
      best = q.sum_xq / q.sum_q2;
    }
  };
  const float top = s.grid.top() + (s.iq1() ? kIQ1Delta : 0.0f);
  for (int c = 0; c < 16; ++c) consider(top * (low + (high - low) * float(c) / 15.0f) / amax);
  if (best > 0.0f) consider(1.0f / best);
  if (s.iq1() && best > 0.0f) {
    // IQ1 stores the step that keeps the block's weighted norm (sum w (step q)^2 = sum w x^2), not the
    // least-squares one: at 1.5-1.75 bits least squares shrinks every matrix by 3-5%, and on a whole
    // model that cost more than its lower squared error gained (docs/QUANTIZATION.md, IQ1_M on the 1.5B).
    const Assignment q = assign(s, x, a, w, 1.0f / best);
    if (q.sum_q2 > 0.0f) return std::sqrt(sum_x2 / q.sum_q2);
  }
  return best;
}

// A super-block: its F16 d, and per scale block the code and the assignment at its stored step.
struct SuperBlock {
  uint16_t d = 0;
  int code[16] = {};
  Assignment block[16];
};

SuperBlock quantize_super_block(const Spec& s, const float* x, const float* importance) {
  float w[kQK_K], a[kQK_K];
  if (importance != nullptr) {
    importance_weights(x, kQK_K, importance, w);
  } else {
    std::fill(w, w + kQK_K, 1.0f);
  }
  for (int i = 0; i < kQK_K; ++i) a[i] = std::fabs(x[i]);
  const int blocks = kQK_K / s.block;
  float steps[16], sum_x2[16], max_step = 0.0f;
  for (int j = 0; j < blocks; ++j) {
    const int o = s.block * j;
    sum_x2[j] = 0.0f;
    for (int i = 0; i < s.block; ++i) sum_x2[j] += w[o + i] * a[o + i] * a[o + i];
    steps[j] = best_step(s, x + o, a + o, w + o, sum_x2[j]);
    max_step = std::max(max_step, steps[j]);
  }
  SuperBlock out;
  out.d = float_to_fp16(s.d_for_top(max_step));
  const float d = fp16_to_float(out.d);
  for (int j = 0; j < blocks; ++j) {
    const int o = s.block * j;
    // The code whose step is nearest: step / step(d, 0) = 2 code + 1 for both kinds.
    const float unit = s.step(d, 0);
    const int nearest = unit > 0.0f ? std::clamp(int(std::lround((steps[j] / unit - 1.0f) / 2.0f)), 0, s.max_code) : 0;
    float best_error = kInf;
    // IQ2: the best of three codes by error; IQ1: the code nearest its norm-keeping step (choosing
    // by error would pull it back to the shrinking one).
    const int first_code = s.iq1() ? nearest : std::max(0, nearest - 1);
    const int last_code = s.iq1() ? nearest : std::min(s.max_code, nearest + 1);
    for (int code = first_code; code <= last_code; ++code) {
      const float step = s.step(d, code);
      const Assignment q = assign(s, x + o, a + o, w + o, step > 0.0f ? 1.0f / step : 0.0f);
      const float error = q.error(step, sum_x2[j]);
      if (code == first_code || error < best_error) {
        best_error = error;
        out.code[j] = code;
        out.block[j] = q;
      }
    }
  }
  return out;
}

// The 8 sign bits of group k of a block (bit i: value i stored negative).
uint8_t sign_bits(const float* x, const Assignment& q, int k) {
  uint8_t bits = 0;
  for (int i = 0; i < kGroup; ++i) bits |= uint8_t(((x[kGroup * k + i] < 0.0f) != ((q.flipped[k] >> i & 1) != 0)) << i);
  return bits;
}

template <class Block, class Pack>
void quantize_rows(const Spec& s, const float* src, void* dst, int64_t n, const float* importance,
                   Pack pack) {
  Block* blocks = static_cast<Block*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    const SuperBlock q = quantize_super_block(s, x, importance != nullptr ? importance + b * kQK_K : nullptr);
    std::memset(&blocks[b], 0, sizeof(Block));
    pack(x, q, blocks[b]);
  }
}

// The five formats (grids built on first use).
const Spec& spec(DType type) {
  static const Grid iq2xxs(kIQ2XXSGridCodes, 8.0f, 25.0f, 43.0f), iq2xs(kIQ2XSGridCodes, 8.0f, 25.0f, 43.0f),
      iq2s(kIQ2SGridCodes, 8.0f, 25.0f, 43.0f), iq1s(kIQ1SGridCodes, -1.0f, 0.0f, 1.0f);
  static const Spec specs[] = {{iq2xxs, 32, Kind::Iq2ParitySigns, 15},
                               {iq2xs, 16, Kind::Iq2ParitySigns, 15},
                               {iq2s, 16, Kind::Iq2FreeSigns, 15},
                               {iq1s, 32, Kind::Iq1DeltaPerBlock, 7},
                               {iq1s, 16, Kind::Iq1DeltaPerGroup, 7}};
  switch (type) {
    case DType::IQ2_XXS: return specs[0];
    case DType::IQ2_XS: return specs[1];
    case DType::IQ2_S: return specs[2];
    case DType::IQ1_S: return specs[3];
    default: return specs[4];  // IQ1_M
  }
}

void quantize_iq2_xxs(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_rows<BlockIQ2_XXS>(spec(DType::IQ2_XXS), src, dst, n, importance,
                              [](const float* x, const SuperBlock& q, BlockIQ2_XXS& out) {
                                out.d = q.d;
                                for (int j = 0; j < 8; ++j) {
                                  uint32_t indices = 0, signs = uint32_t(q.code[j]) << 28;
                                  for (int l = 0; l < 4; ++l) {
                                    indices |= uint32_t(q.block[j].entry[l]) << (8 * l);
                                    // Even parity by construction: bit 7 is implied by the table.
                                    signs |= uint32_t(sign_bits(x + 32 * j, q.block[j], l) & 127) << (7 * l);
                                  }
                                  out.qs[4 * j] = uint16_t(indices);
                                  out.qs[4 * j + 1] = uint16_t(indices >> 16);
                                  out.qs[4 * j + 2] = uint16_t(signs);
                                  out.qs[4 * j + 3] = uint16_t(signs >> 16);
                                }
                              });
}

void quantize_iq2_xs(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_rows<BlockIQ2_XS>(spec(DType::IQ2_XS), src, dst, n, importance,
                             [](const float* x, const SuperBlock& q, BlockIQ2_XS& out) {
                               out.d = q.d;
                               for (int k = 0; k < 16; ++k) {  // scale block k: sub-block k / 2, half k % 2
                                 const int j = k / 2, h = k % 2;
                                 out.scales[j] |= uint8_t(q.code[k] << (4 * h));
                                 for (int g = 0; g < 2; ++g) {
                                   const uint8_t signs = sign_bits(x + 16 * k, q.block[k], g) & 127;
                                   out.qs[4 * j + 2 * h + g] = uint16_t(q.block[k].entry[g] | signs << 9);
                                 }
                               }
                             });
}

void quantize_iq2_s(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_rows<BlockIQ2_S>(spec(DType::IQ2_S), src, dst, n, importance,
                            [](const float* x, const SuperBlock& q, BlockIQ2_S& out) {
                              out.d = q.d;
                              for (int k = 0; k < 16; ++k) {
                                const int j = k / 2, h = k % 2;
                                out.scales[j] |= uint8_t(q.code[k] << (4 * h));
                                for (int g = 0; g < 2; ++g) {
                                  const int l = 2 * h + g, entry = q.block[k].entry[g];
                                  out.qs[4 * j + l] = uint8_t(entry & 255);
                                  out.qh[j] |= uint8_t((entry >> 8) << (2 * l));
                                  out.qs[kQK_K / 8 + 4 * j + l] = sign_bits(x + 16 * k, q.block[k], g);
                                }
                              }
                            });
}

void quantize_iq1_s(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_rows<BlockIQ1_S>(spec(DType::IQ1_S), src, dst, n, importance,
                            [](const float*, const SuperBlock& q, BlockIQ1_S& out) {
                              out.d = q.d;
                              for (int j = 0; j < 8; ++j) {
                                uint16_t high = uint16_t(q.code[j] << 12 | (q.block[j].negative_delta[0] ? 0x8000 : 0));
                                for (int l = 0; l < 4; ++l) {
                                  out.qs[4 * j + l] = uint8_t(q.block[j].entry[l] & 255);
                                  high |= uint16_t((q.block[j].entry[l] >> 8) << (3 * l));
                                }
                                out.qh[j] = high;
                              }
                            });
}

void quantize_iq1_m(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_rows<BlockIQ1_M>(spec(DType::IQ1_M), src, dst, n, importance,
                            [](const float*, const SuperBlock& q, BlockIQ1_M& out) {
                              uint16_t words[4] = {};
                              for (int k = 0; k < 16; ++k) {  // scale block k: sub-block k / 2, half k % 2
                                const int j = k / 2, h = k % 2;
                                words[j / 2] |= uint16_t(q.code[k] << (6 * (j % 2) + 3 * h));
                                for (int g = 0; g < 2; ++g) {
                                  const int l = 2 * h + g, entry = q.block[k].entry[g];
                                  out.qs[4 * j + l] = uint8_t(entry & 255);
                                  const int nibble = (entry >> 8) | (q.block[k].negative_delta[g] ? 8 : 0);
                                  out.qh[2 * j + h] |= uint8_t(nibble << (4 * g));
                                }
                              }
                              for (int w = 0; w < 4; ++w) {
                                words[w] |= uint16_t((q.d >> (4 * w) & 15) << 12);
                                out.scales[2 * w] = uint8_t(words[w]);
                                out.scales[2 * w + 1] = uint8_t(words[w] >> 8);
                              }
                            });
}

}  // namespace

void quantize_row_iq2_xxs(const float* src, void* dst, int64_t n) { quantize_iq2_xxs(src, dst, n, nullptr); }
void quantize_row_iq2_xxs_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_iq2_xxs(src, dst, n, importance);
}
void quantize_row_iq2_xs(const float* src, void* dst, int64_t n) { quantize_iq2_xs(src, dst, n, nullptr); }
void quantize_row_iq2_xs_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_iq2_xs(src, dst, n, importance);
}
void quantize_row_iq2_s(const float* src, void* dst, int64_t n) { quantize_iq2_s(src, dst, n, nullptr); }
void quantize_row_iq2_s_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_iq2_s(src, dst, n, importance);
}
void quantize_row_iq1_s(const float* src, void* dst, int64_t n) { quantize_iq1_s(src, dst, n, nullptr); }
void quantize_row_iq1_s_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_iq1_s(src, dst, n, importance);
}
void quantize_row_iq1_m(const float* src, void* dst, int64_t n) { quantize_iq1_m(src, dst, n, nullptr); }
void quantize_row_iq1_m_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_iq1_m(src, dst, n, importance);
}

}  // namespace kestrel::quant::ref
