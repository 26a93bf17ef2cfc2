// NF4 (bitsandbytes' NormalFloat 4-bit, blocks of 64):
//  - the quantizer picks bitsandbytes' indices bit for bit and stores its absmax as F16; the
//    dequantization matches bitsandbytes' within the F16 rounding of absmax plus the levels'
//    1/16256 grid (fixture: scripts/gen_nf4_fixture.py, a numpy transcription of bitsandbytes'
//    CPU backend, with blocks of exact midpoint ties);
//  - the int16 levels and their int8 high/low split (what the SIMD kernels shuffle) are exact;
//  - the layout by hand (nibble order), the round-trip bound, vec_dot against the dequantized dot;
//  - the importance-weighted quantizer's weighted error is below the plain one's.
// The SIMD kernels are checked against the reference in backend_ops_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/format.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using quant::WeightFormat;
constexpr int kBlock = quant::kNF4BlockSize;

struct Nf4Fixture {
  uint32_t blocks = 0;
  std::vector<float> original, absmax, dequantized;
  std::vector<uint8_t> indices;
};

Nf4Fixture read_fixture() {
  std::ifstream in(test::test_data_path("quant/nf4.bin"), std::ios::binary);
  EXPECT_TRUE(in.good());
  char magic[4] = {};
  uint32_t version = 0;
  Nf4Fixture f;
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(&version), 4);
  in.read(reinterpret_cast<char*>(&f.blocks), 4);
  EXPECT_EQ(std::string(magic, 4), "NF4X");
  EXPECT_EQ(version, 1u);
  const size_t n = size_t(f.blocks) * kBlock;
  f.original.resize(n), f.indices.resize(n), f.absmax.resize(f.blocks), f.dequantized.resize(n);
  in.read(reinterpret_cast<char*>(f.original.data()), std::streamsize(n * 4));
  in.read(reinterpret_cast<char*>(f.indices.data()), std::streamsize(n));
  in.read(reinterpret_cast<char*>(f.absmax.data()), std::streamsize(f.blocks * 4));
  in.read(reinterpret_cast<char*>(f.dequantized.data()), std::streamsize(n * 4));
  EXPECT_TRUE(in.good()) << "nf4.bin truncated";
  return f;
}

int index_at(const uint8_t* block, int i) { return quant::group_level<kBlock, 4>(block + 2, i); }

TEST(Nf4, IdsNamesAndLevels) {
  const DTypeLayout layout = dtype_layout(DType::NF4);
  EXPECT_EQ(layout.name, "NF4");
  EXPECT_EQ(layout.block_size, 64);
  EXPECT_EQ(layout.block_bytes, 34);
  EXPECT_EQ(quant::require_format(DType::NF4).activation_type, DType::Q8_0);
  for (int i = 0; i < 16; ++i) {
    const int level = quant::nf4_level(i);
    EXPECT_EQ(level, int(std::lround(double(quant::kNF4Codes[i]) * 16256.0))) << i;
    EXPECT_EQ(128 * quant::nf4_level_high(i) + quant::nf4_level_low(i), level) << i;
    EXPECT_LE(std::abs(int(quant::nf4_level_low(i))), 64) << i;
    EXPECT_LE(std::fabs(level / 16256.0 - quant::kNF4Codes[i]), 0.5 / 16256.0 + 1e-9) << i;
    if (i > 0) {
      EXPECT_GT(level, quant::nf4_level(i - 1)) << i;
    }
  }
  EXPECT_EQ(quant::nf4_level(0), -16256);
  EXPECT_EQ(quant::nf4_level(7), 0);
  EXPECT_EQ(quant::nf4_level(15), 16256);
}

TEST(Nf4, QuantizerPicksBitsandbytesIndices) {
  const Nf4Fixture f = read_fixture();
  ASSERT_GT(f.blocks, 40u);
  const WeightFormat& nf4 = quant::require_format(DType::NF4);
  std::vector<uint8_t> block(34);
  std::vector<float> ours(kBlock);
  int ties_checked = 0;
  for (uint32_t b = 0; b < f.blocks; ++b) {
    const float* x = f.original.data() + size_t(b) * kBlock;
    nf4.quantize_row(x, block.data(), kBlock);
    uint16_t d_bits;
    std::memcpy(&d_bits, block.data(), 2);
    EXPECT_EQ(d_bits, float_to_fp16(f.absmax[b])) << "block " << b;
    for (int i = 0; i < kBlock; ++i) {
      ASSERT_EQ(index_at(block.data(), i), f.indices[size_t(b) * kBlock + i])
          << "block " << b << " element " << i << " x = " << x[i] << " absmax " << f.absmax[b];
      ties_checked += f.absmax[b] == 1.0f;
    }
    nf4.dequantize_row(block.data(), ours.data(), kBlock);
    // ours = d' * level / 16256, bitsandbytes' = absmax * code: |d' - absmax| |code| + d' 0.5/16256.
    const double d16 = fp16_to_float(d_bits);
    for (int i = 0; i < kBlock; ++i) {
      const double code = quant::kNF4Codes[f.indices[size_t(b) * kBlock + i]];
      const double tol = std::fabs(d16 - f.absmax[b]) * std::fabs(code) + d16 * (0.5 / 16256.0) + 1e-6 * d16 + 1e-30;
      EXPECT_NEAR(ours[size_t(i)], f.dequantized[size_t(b) * kBlock + i], tol) << "block " << b << " element " << i;
    }
  }
  EXPECT_GE(ties_checked, 3 * kBlock) << "the fixture's midpoint blocks";
}

TEST(Nf4, HandComputedLayout) {
  // x = 2 * code[(5 i) % 16]: absmax 2 (F16 0x4000), index (5 i) % 16, byte l = idx(l) | idx(l + 32) << 4.
  std::vector<float> x(kBlock);
  for (int i = 0; i < kBlock; ++i) x[size_t(i)] = 2.0f * quant::kNF4Codes[(5 * i) % 16];
  const WeightFormat& nf4 = quant::require_format(DType::NF4);
  std::vector<uint8_t> q(34);
  nf4.quantize_row(x.data(), q.data(), kBlock);
  EXPECT_EQ(q[0] | q[1] << 8, 0x4000);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(q[size_t(2 + l)], ((5 * l) % 16) | ((5 * (l + 32)) % 16) << 4) << l;
  std::vector<float> y(kBlock);
  nf4.dequantize_row(q.data(), y.data(), kBlock);
  for (int i = 0; i < kBlock; ++i) {
    EXPECT_EQ(y[size_t(i)], 2.0f * (float(quant::nf4_level((5 * i) % 16)) / 16256.0f)) << i;
  }
  // A zero block: d = 0, every index 7 (code 0).
  std::vector<float> zero(kBlock, 0.0f);
  nf4.quantize_row(zero.data(), q.data(), kBlock);
  EXPECT_EQ(q[0] | q[1] << 8, 0);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(q[size_t(2 + l)], 0x77);
}

std::vector<float> random_row(std::mt19937& rng, int64_t n, float scale) {
  std::student_t_distribution<float> t(4.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = scale * t(rng);
  return x;
}

TEST(Nf4, RoundTripBoundAndVecDot) {
  std::mt19937 rng(13);
  const WeightFormat& nf4 = quant::require_format(DType::NF4);
  const WeightFormat& q8 = quant::require_format(DType::Q8_0);
  // The widest gap between neighbouring codes is 1 - 0.72296 (the top one): half of it, in units
  // of absmax, bounds the rounding error; plus the F16 absmax's relative 2^-11 and the level grid.
  double widest = 0;
  for (int i = 0; i < 15; ++i) widest = std::max(widest, double(quant::kNF4Codes[i + 1]) - quant::kNF4Codes[i]);
  for (int64_t n : {64, 192, 448}) {
    for (float scale : {0.01f, 1.0f, 250.0f}) {
      const std::vector<float> w = random_row(rng, n, scale), a = random_row(rng, n, 1.0f);
      std::vector<uint8_t> qw(size_t(n / 64 * 34)), qa(size_t(n / 32 * 34));
      nf4.quantize_row(w.data(), qw.data(), n);
      q8.quantize_row(a.data(), qa.data(), n);
      std::vector<float> dw(static_cast<size_t>(n)), da(static_cast<size_t>(n));
      nf4.dequantize_row(qw.data(), dw.data(), n);
      q8.dequantize_row(qa.data(), da.data(), n);
      double exact = 0, magnitude = 0;
      for (int64_t b = 0; b < n / 64; ++b) {
        float absmax = 0;
        for (int i = 0; i < 64; ++i) absmax = std::max(absmax, std::fabs(w[size_t(b * 64 + i)]));
        for (int i = 0; i < 64; ++i) {
          const size_t k = size_t(b * 64 + i);
          ASSERT_LE(std::fabs(dw[k] - w[k]), absmax * (widest / 2 + 0x1p-11 + 1.0 / 16256)) << n << " " << k;
          exact += double(dw[k]) * da[k];
          magnitude += std::fabs(double(dw[k]) * da[k]);
        }
      }
      EXPECT_NEAR(nf4.vec_dot(qw.data(), qa.data(), n), exact, (double(n) + 8) * 0x1p-24 * magnitude + 1e-30)
          << "n=" << n << " scale " << scale;
    }
  }
}

TEST(Nf4, ImportanceWeightedQuantizerLowersTheWeightedError) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> importance_dist(0.05f, 4.0f);
  const WeightFormat& nf4 = quant::require_format(DType::NF4);
  ASSERT_NE(nf4.quantize_row_weighted, nullptr);
  const int64_t n = 64 * 200;
  const std::vector<float> x = random_row(rng, n, 0.03f);
  std::vector<float> importance(static_cast<size_t>(n));
  for (float& v : importance) v = importance_dist(rng);
  std::vector<uint8_t> plain(size_t(n / 64 * 34)), weighted(plain.size());
  nf4.quantize_row(x.data(), plain.data(), n);
  nf4.quantize_row_weighted(x.data(), weighted.data(), n, importance.data());
  std::vector<float> yp(static_cast<size_t>(n)), yw(static_cast<size_t>(n));
  nf4.dequantize_row(plain.data(), yp.data(), n);
  nf4.dequantize_row(weighted.data(), yw.data(), n);
  double error_plain = 0, error_weighted = 0;
  for (size_t i = 0; i < size_t(n); ++i) {
    error_plain += importance[i] * double(yp[i] - x[i]) * (yp[i] - x[i]);
    error_weighted += importance[i] * double(yw[i] - x[i]) * (yw[i] - x[i]);
  }
  EXPECT_LT(error_weighted, 0.95 * error_plain) << "plain " << error_plain << " weighted " << error_weighted;
}

}  // namespace
}  // namespace kestrel
