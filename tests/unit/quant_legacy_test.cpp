// Q4_1, Q5_0 and Q5_1 (GGML's other 32-blocks, found in real files such as Gemma 3's Q4_K_M):
// blocks written by llama.cpp's llama-quantize dequantize like gguf-py does, our quantizer keeps
// every value within its layout's bound, and vec_dot equals the dot of the dequantized rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "core/half.h"
#include "quant/format.h"
#include "quant_fixture.h"
#include "test_paths.h"

namespace kestrel {
namespace {

constexpr int kBlock = 32;
constexpr double kU = 0x1p-24;  // float unit roundoff

using Fixture = test::QuantFixture;

// Fixture format: scripts/gen_quant_fixtures.py (values per block = 32 here).
Fixture load(const std::string& name) { return test::read_quant_fixture(name, kBlock); }

struct Case {
  const char* file;
  DType type;
};
const Case kCases[] = {{"q4_1.bin", DType::Q4_1}, {"q5_0.bin", DType::Q5_0}, {"q5_1.bin", DType::Q5_1}};

TEST(LegacyQuantFixture, LlamaCppBlocksDequantizeLikeGgufPy) {
  for (const Case& c : kCases) {
    const Fixture f = load(c.file);
    const quant::WeightFormat& format = quant::require_format(c.type);
    ASSERT_EQ(f.ggml_type, uint32_t(c.type)) << c.file;
    ASSERT_EQ(int64_t(f.block_bytes), format.block_bytes) << c.file;
    std::vector<float> ours(f.gguf_py.size());
    format.dequantize_row(f.raw.data(), ours.data(), int64_t(ours.size()));
    for (size_t i = 0; i < ours.size(); ++i) {
      // gguf-py evaluates d * q + m (or d * (q - 16)) in float32 like our reference: within one
      // rounding of the larger term.
      EXPECT_NEAR(ours[i], f.gguf_py[i], std::fabs(f.gguf_py[i]) * 2 * kU + 1e-12) << c.file << " i=" << i;
    }
  }
}

TEST(LegacyQuantFixture, OurQuantizerIsAsGoodAsLlamaCppOnTheSameBlocks) {
  for (const Case& c : kCases) {
    const Fixture f = load(c.file);
    const quant::WeightFormat& format = quant::require_format(c.type);
    const int64_t n = int64_t(f.original.size());
    std::vector<uint8_t> bytes(size_t(quant::row_bytes(format, n)));
    std::vector<float> ours(static_cast<size_t>(n));
    format.quantize_row(f.original.data(), bytes.data(), n);
    format.dequantize_row(bytes.data(), ours.data(), n);
    double ours_err = 0.0, theirs_err = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      ours_err += std::pow(double(ours[size_t(i)]) - f.original[size_t(i)], 2);
      theirs_err += std::pow(double(f.gguf_py[size_t(i)]) - f.original[size_t(i)], 2);
    }
    // Same rounding rule as llama.cpp's reference quantizer: the same error up to float noise.
    EXPECT_LE(ours_err, theirs_err * 1.001 + 1e-12) << c.file;
  }
}

// Per element: half a step of the stored scale, plus the F16 roundings of d (times the largest
// level) and of m; Q5_0 maps the extreme to -16, so the other side may clamp at +15 (one step).
TEST(LegacyQuant, RoundTripWithinLayoutBound) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Case& c : kCases) {
    const quant::WeightFormat& format = quant::require_format(c.type);
    for (int64_t n : {32, 32 * 7, 32 * 33}) {
      for (float scale : {1.0f, 1e-3f, 300.0f}) {
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) v = normal(rng) * scale;
        if (n >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // a zero block
        std::vector<uint8_t> bytes(size_t(quant::row_bytes(format, n)));
        std::vector<float> y(static_cast<size_t>(n));
        format.quantize_row(x.data(), bytes.data(), n);
        format.dequantize_row(bytes.data(), y.data(), n);
        for (int64_t b = 0; b < n / kBlock; ++b) {
          float lo = x[size_t(b * kBlock)], hi = lo, amax = 0.0f;
          for (int i = 0; i < kBlock; ++i) {
            lo = std::min(lo, x[size_t(b * kBlock + i)]);
            hi = std::max(hi, x[size_t(b * kBlock + i)]);
            amax = std::max(amax, std::fabs(x[size_t(b * kBlock + i)]));
          }
          const bool symmetric = c.type == DType::Q5_0;
          const double levels = c.type == DType::Q4_1 ? 15.0 : symmetric ? 16.0 : 31.0;
          const double d = symmetric ? amax / 16.0 : (hi - lo) / levels;
          const double d_err = d * 0x1p-11;          // F16 rounding of the scale
          const double m_err = std::fabs(lo) * 0x1p-11 + 0x1p-25;
          for (int i = 0; i < kBlock; ++i) {
            const size_t k = size_t(b * kBlock + i);
            const double step = symmetric ? d : d / 2 + (levels * d_err) + m_err;
            const double bound = (symmetric ? d + 16 * d_err : step) + 1e-4 * d + 1e-30;
            ASSERT_LE(std::fabs(double(y[k]) - x[k]), bound) << c.file << " n=" << n << " i=" << k;
          }
        }
      }
    }
  }
}

TEST(LegacyQuant, VecDotEqualsDotOfDequantizedRows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Case& c : kCases) {
    const quant::WeightFormat& format = quant::require_format(c.type);
    const quant::WeightFormat& act = quant::require_format(format.activation_type);
    for (int64_t n : {32, 32 * 5, 32 * 64}) {
      std::vector<float> w(static_cast<size_t>(n)), a(static_cast<size_t>(n));
      for (float& v : w) v = normal(rng) * 0.05f;
      for (float& v : a) v = normal(rng);
      std::vector<uint8_t> wq(size_t(quant::row_bytes(format, n))), aq(size_t(quant::row_bytes(act, n)));
      format.quantize_row(w.data(), wq.data(), n);
      act.quantize_row(a.data(), aq.data(), n);
      std::vector<float> wd(static_cast<size_t>(n)), ad(static_cast<size_t>(n));
      format.dequantize_row(wq.data(), wd.data(), n);
      act.dequantize_row(aq.data(), ad.data(), n);
      double exact = 0.0, sum_abs = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(wd[size_t(i)]) * ad[size_t(i)];
        sum_abs += std::fabs(double(wd[size_t(i)]) * ad[size_t(i)]);
      }
      // The minimum's term uses Q8_1's stored s = d * sum(q), rounded to F16: 2^-11 relative on
      // each block's sum; plus float accumulation.
      double s_err = 0.0;
      if (act.type == DType::Q8_1) {
        for (int64_t b = 0; b < n / kBlock; ++b) {
          double block_sum = 0.0, block_abs = 0.0;
          for (int i = 0; i < kBlock; ++i) {
            block_sum += ad[size_t(b * kBlock + i)];
            block_abs += std::fabs(double(wd[size_t(b * kBlock + i)]));
          }
          s_err += std::fabs(block_sum) * 0x1p-10 * block_abs;
        }
      }
      const float got = format.vec_dot(wq.data(), aq.data(), n);
      EXPECT_NEAR(got, exact, double(n + 4) * kU * sum_abs + s_err + 1e-12) << c.file << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace kestrel
