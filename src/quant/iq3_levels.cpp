// IQ3_S_L4 (quant/blocks.h): IQ3_S's values as 4-bit levels. Every IQ3_S grid coordinate is one of
// 1, 3, .., 15 and carries its own sign, so value i of sub-block j is d (2 s_j + 1) v_i with v_i odd
// in [-15, 15], i.e. 2 n_i - 15 for n_i = (v_i + 15) / 2 in [0, 15]. The re-encoding keeps d and the
// scale codes as they are, so dequantization (the same float operations as IQ3_S's) and the dot
// (the same exact integer sum per super-block, then the same float products) give IQ3_S's results
// bit for bit; kernels read nibbles instead of looking up a 512-entry grid.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/format.h"
#include "quant/iq3_grids.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant {
namespace {

constexpr int kSubBlocks = kQK_K / 32;

// What the re-encoding rests on: every grid coordinate is odd and at most 15.
constexpr bool grid_is_odd_levels() {
  for (uint32_t entry : kIQ3SGrid) {
    for (int i = 0; i < 4; ++i) {
      const uint32_t g = entry >> (8 * i) & 0xff;
      if (g % 2 == 0 || g > 15) return false;
    }
  }
  return true;
}
static_assert(grid_is_odd_levels());

// Each grid entry's 4 coordinates g as the levels of +g, (15 + g) / 2, one per byte; -g's is
// 15 minus that.
struct PositiveLevels {
  uint32_t v[512];
};
constexpr PositiveLevels kPositiveLevels = [] {
  PositiveLevels table{};
  for (int e = 0; e < 512; ++e) {
    for (int i = 0; i < 4; ++i) table.v[e] |= ((15 + (kIQ3SGrid[e] >> (8 * i) & 0xff)) / 2) << (8 * i);
  }
  return table;
}();

// Four sign bits as byte masks (0x0f where the value is negative): 15 - n = n ^ 15 for n <= 15.
struct SignFlips {
  uint32_t v[16];
};
constexpr SignFlips kSignFlips = [] {
  SignFlips table{};
  for (int bits = 0; bits < 16; ++bits) {
    for (int t = 0; t < 4; ++t) table.v[bits] |= (bits >> t & 1) != 0 ? 0x0fu << (8 * t) : 0u;
  }
  return table;
}();

// The levels of values 32 j + 4 k .. + 3 (one grid entry and its four signs), one per byte.
uint32_t entry_levels(const BlockIQ3_S& in, int j, int k) {
  const uint32_t levels = kPositiveLevels.v[in.qs[8 * j + k] | (in.qh[j] >> k & 1) << 8];
  return levels ^ kSignFlips.v[in.signs[4 * j + k / 2] >> (4 * (k % 2)) & 15];
}

// Sub-blocks 2 c and 2 c + 1 fill the low and high nibbles of qs[32 c .. 32 c + 31], 4 bytes per
// grid entry.
void transcode_iq3_s_block(const BlockIQ3_S& in, BlockIQ3_S_L4& out) {
  out.d = in.d;
  std::memcpy(out.scales, in.scales, sizeof(out.scales));
  for (int c = 0; c < kSubBlocks / 2; ++c) {
    for (int k = 0; k < 8; ++k) {
      const uint32_t bytes = entry_levels(in, 2 * c, k) | entry_levels(in, 2 * c + 1, k) << 4;
      std::memcpy(out.qs + 32 * c + 4 * k, &bytes, 4);  // little-endian: byte t is value 4 k + t
    }
  }
}

int l4_level(const BlockIQ3_S_L4& b, int i) { return b.qs[32 * (i / 64) + i % 32] >> (4 * (i % 64 / 32)) & 15; }
int l4_value(const BlockIQ3_S_L4& b, int i) { return 2 * l4_level(b, i) - 15; }
int l4_code(const BlockIQ3_S_L4& b, int j) { return b.scales[j / 2] >> (4 * (j % 2)) & 15; }

void transcode_iq3_s(const void* src, void* dst, int64_t blocks) {
  const auto* in = static_cast<const BlockIQ3_S*>(src);
  auto* out = static_cast<BlockIQ3_S_L4*>(dst);
  for (int64_t b = 0; b < blocks; ++b) transcode_iq3_s_block(in[b], out[b]);
}

}  // namespace

bool can_transcode(DType from, DType to) { return from == DType::IQ3_S && to == DType::IQ3_S_L4; }

void transcode_blocks(DType from, DType to, const void* src, void* dst, int64_t blocks) {
  if (!can_transcode(from, to)) fail("internal: no exact re-encoding of {} as {}", dtype_name(from), dtype_name(to));
  transcode_iq3_s(src, dst, blocks);
}

namespace ref {

// IQ3_S's quantizer (importance-weighted when given), then the re-encoding.
void quantize_row_iq3_s_l4_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  std::vector<BlockIQ3_S> blocks(size_t(n / kQK_K));
  quantize_row_with_importance(require_format(DType::IQ3_S), src, blocks.data(), n, importance);
  transcode_iq3_s(blocks.data(), dst, int64_t(blocks.size()));
}

void quantize_row_iq3_s_l4(const float* src, void* dst, int64_t n) { quantize_row_iq3_s_l4_weighted(src, dst, n, nullptr); }

// As dequantize_row_iq3_s: step d (2 s + 1), times the magnitude, then the sign.
void dequantize_row_iq3_s_l4(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ3_S_L4*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ3_S_L4& block = blocks[b];
    const float d = fp16_to_float(block.d);
    for (int j = 0; j < kSubBlocks; ++j) {
      const float step = d * float(1 + 2 * l4_code(block, j));
      for (int i = 32 * j; i < 32 * j + 32; ++i) {
        const int v = l4_value(block, i);
        const float magnitude = step * float(v < 0 ? -v : v);
        dst[b * kQK_K + i] = v < 0 ? -magnitude : magnitude;
      }
    }
  }
}

// As vec_dot_iq3_s_q8_K: S = sum_j (2 s_j + 1) dot_j exactly, then d_a (d S) per super-block.
float vec_dot_iq3_s_l4_q8_K(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_S_L4*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int32_t scaled = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      int32_t dot = 0;
      for (int i = 32 * j; i < 32 * j + 32; ++i) dot += l4_value(x[b], i) * int32_t(y[b].qs[i]);
      scaled += (2 * l4_code(x[b], j) + 1) * dot;
    }
    sum += y[b].d * (fp16_to_float(x[b].d) * float(scaled));
  }
  return sum;
}

}  // namespace ref
}  // namespace kestrel::quant
