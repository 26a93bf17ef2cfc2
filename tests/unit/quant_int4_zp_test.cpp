// INT4_ZP_G32/G64/G128 (quant/blocks.h): the scale word, dequantization to exactly s * (q - z), and
// the quantizer against a plain double-precision transcription of GPTQ's round-to-nearest
// (Quantizer.find_params with sym=False: the range widened to include 0, z = round(-min / s),
// q = clamp(round(x / s) + z, 0, 15)), with s rounded to F16 as stored. The kernels are checked
// against these references by backend_ops_test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/format.h"

namespace kestrel {
namespace {

const DType kTypes[] = {DType::INT4_ZP_G32, DType::INT4_ZP_G64, DType::INT4_ZP_G128};

TEST(Int4Zp, IdsNamesAndLayouts) {
  EXPECT_EQ(dtype_from_name("int4_zp_g128"), DType::INT4_ZP_G128);
  EXPECT_EQ(dtype_row_bytes(DType::INT4_ZP_G32, 96), 3 * 20);
  EXPECT_EQ(dtype_row_bytes(DType::INT4_ZP_G64, 128), 2 * 36);
  EXPECT_EQ(dtype_row_bytes(DType::INT4_ZP_G128, 256), 2 * 68);
  for (DType t : kTypes) {
    const quant::WeightFormat& f = quant::require_format(t);
    EXPECT_EQ(f.block_bytes, dtype_layout(t).block_bytes);
    EXPECT_EQ(f.activation_type, DType::Q8_1);
  }
}

TEST(Int4Zp, ScaleWordHoldsF16AndBf16ScalesExactly) {
  uint32_t word = 0;
  // Every F16 value (normal and subnormal) and a spread of BF16 values widen with the low byte clear.
  for (uint32_t h = 0; h < 0x7c00; h += 7) {
    const float s = fp16_to_float(uint16_t(h));
    ASSERT_TRUE(quant::zp_pack(s, 15, &word)) << h;
    EXPECT_EQ(quant::zp_scale(word), s);
    EXPECT_EQ(quant::zp_zero(word), 15);
  }
  for (uint32_t b = 0x0080; b < 0x7f80; b += 13) {
    const float s = bf16_to_float(uint16_t(b));
    ASSERT_TRUE(quant::zp_pack(s, 200, &word)) << b;
    EXPECT_EQ(quant::zp_scale(word), s);
    EXPECT_EQ(quant::zp_zero(word), 200);
  }
  EXPECT_FALSE(quant::zp_pack(1.0f + 0x1p-23f, 0, &word)) << "an F32 scale using its low mantissa bits";
  EXPECT_FALSE(quant::zp_pack(1.0f, 256, &word));
  EXPECT_FALSE(quant::zp_pack(1.0f, -1, &word));
}

// One block of G written by hand: nibble i in byte i % (G/2), low nibble for the first half.
template <int G>
void check_hand_block() {
  quant::BlockInt4Zp<G> block{};
  const float s = bf16_to_float(0x47c3);  // 99840: a BF16 scale beyond F16's range
  ASSERT_NE(fp16_to_float(float_to_fp16(s)), s);
  ASSERT_TRUE(quant::zp_pack(s, 9, &block.scale_zero));
  int q[G];
  for (int i = 0; i < G; ++i) {
    q[i] = (i * 7 + 3) % 16;
    block.qs[i % (G / 2)] |= uint8_t(q[i] << (i < G / 2 ? 0 : 4));
  }
  std::vector<float> out(G);
  const DType type = G == 32 ? DType::INT4_ZP_G32 : G == 64 ? DType::INT4_ZP_G64 : DType::INT4_ZP_G128;
  quant::require_format(type).dequantize_row(&block, out.data(), G);
  for (int i = 0; i < G; ++i) {
    EXPECT_EQ(double(out[size_t(i)]), double(s) * (q[i] - 9)) << "element " << i << " (exact)";
  }
}

TEST(Int4Zp, DequantizeIsExactlyScaleTimesLevelMinusZero) {
  check_hand_block<32>();
  check_hand_block<64>();
  check_hand_block<128>();
}

TEST(Int4Zp, QuantizerIsGptqRoundToNearest) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (DType t : kTypes) {
    const quant::WeightFormat& f = quant::require_format(t);
    const int g = int(f.block_size);
    const int64_t n = 4 * g;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = dist(rng) + (i < g ? 2.5f : 0.0f);  // one all-positive group
    std::vector<uint8_t> row(size_t(quant::row_bytes(f, n)));
    f.quantize_row(x.data(), row.data(), n);
    std::vector<float> deq(static_cast<size_t>(n));
    f.dequantize_row(row.data(), deq.data(), n);
    for (int64_t b = 0; b < n / g; ++b) {
      double lo = 0, hi = 0;
      for (int i = 0; i < g; ++i) lo = std::min(lo, double(x[size_t(b * g + i)])), hi = std::max(hi, double(x[size_t(b * g + i)]));
      const double s = fp16_to_float(float_to_fp16(float((hi - lo) / 15.0)));
      const double z = std::clamp(std::nearbyint(-lo / s), 0.0, 15.0);
      uint32_t word;
      std::memcpy(&word, row.data() + b * f.block_bytes, 4);
      EXPECT_EQ(double(quant::zp_scale(word)), s) << dtype_name(t) << " block " << b;
      EXPECT_EQ(quant::zp_zero(word), int(z)) << dtype_name(t) << " block " << b;
      for (int i = 0; i < g; ++i) {
        const double q = std::clamp(std::nearbyint(double(x[size_t(b * g + i)]) / s) + z, 0.0, 15.0);
        // Ties (x / s exactly at .5) are measure-zero for these random values.
        EXPECT_EQ(double(deq[size_t(b * g + i)]), s * (q - z)) << dtype_name(t) << " element " << b * g + i;
      }
    }
  }
}

}  // namespace
}  // namespace kestrel
