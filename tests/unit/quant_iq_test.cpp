// llama.cpp's non-linear 4-bit formats IQ4_NL (Q8_0 activations) and IQ4_XS (Q8_K activations):
//  - random valid blocks dequantize bitwise like gguf-py's numpy code (fixtures from
//    scripts/gen_iq_fixtures.py), and like an independent decoding written from the layout;
//  - the DType ids, names and sizes are GGML's, and a GGUF file gguf-py wrote with both types
//    loads with the right shapes and the same values;
//  - the quantizer puts every value on the nearest level of the grid its block stores, and on
//    Gaussian rows its error is below Q4_0's (the point of the non-linear levels);
//  - importance weights lower the weighted error;
//  - vec_dot equals the double-precision dot of the dequantized rows within a rounding bound.
// The SIMD kernels are checked against these references in backend_ops_test.cpp.
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
#include "loader/gguf_reader.h"
#include "quant/blocks.h"
#include "quant/format.h"
#include "quant_fixture.h"

namespace kestrel {
namespace {

using quant::WeightFormat;

constexpr double kU = 0x1p-24;  // unit roundoff of float
constexpr int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// ---------------------------------------------------------------------------------------------
// An independent decoding (from llama.cpp's block_iq4_nl / block_iq4_xs): per element its step
// (the float the level is multiplied by) and its level.

struct Decoded {
  std::vector<float> step;
  std::vector<int> level;
};

uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

Decoded decode(DType type, const uint8_t* row, int64_t n) {
  Decoded out;
  if (type == DType::IQ4_NL) {  // d, then 16 bytes: element j low nibble, j + 16 high nibble
    for (int64_t b = 0; b < n / 32; ++b) {
      const uint8_t* block = row + b * 18;
      for (int i = 0; i < 32; ++i) {
        out.step.push_back(fp16_to_float(u16_at(block)));
        out.level.push_back(kLevels[i < 16 ? block[2 + i] & 15 : block[2 + i - 16] >> 4]);
      }
    }
    return out;
  }
  // IQ4_XS: d, scales_h (u16), scales_l[4], qs[128]; sub-block j's 6-bit code is nibble j of
  // scales_l plus bits 2j..2j+1 of scales_h, signed scale = code - 32.
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* block = row + b * 136;
    const float d = fp16_to_float(u16_at(block));
    const uint16_t high = u16_at(block + 2);
    for (int j = 0; j < 8; ++j) {
      const int code = ((block[4 + j / 2] >> (j % 2 == 0 ? 0 : 4)) & 15) | ((high >> (2 * j)) & 3) << 4;
      const float step = d * float(code - 32);
      const uint8_t* qs = block + 8 + 16 * j;
      for (int i = 0; i < 32; ++i) {
        out.step.push_back(step);
        out.level.push_back(kLevels[i < 16 ? qs[i] & 15 : qs[i - 16] >> 4]);
      }
    }
  }
  return out;
}

std::vector<uint8_t> quantize(const WeightFormat& f, const std::vector<float>& x, const float* importance = nullptr) {
  std::vector<uint8_t> bytes(size_t(quant::row_bytes(f, int64_t(x.size()))));
  quant::quantize_row_with_importance(f, x.data(), bytes.data(), int64_t(x.size()), importance);
  return bytes;
}

std::vector<float> dequantize(const WeightFormat& f, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  f.dequantize_row(bytes.data(), out.data(), n);
  return out;
}

// ---------------------------------------------------------------------------------------------
// gguf-py fixtures

using Fixture = test::QuantFixture;

Fixture load_fixture(const std::string& name) { return test::read_quant_fixture(name); }

struct FixtureCase {
  const char* file;
  DType type;
};
const FixtureCase kFixtures[] = {{"iq4_nl.bin", DType::IQ4_NL}, {"iq4_xs.bin", DType::IQ4_XS}};
const DType kTypes[] = {DType::IQ4_NL, DType::IQ4_XS};

TEST(IQ4Fixture, DequantizeIsBitwiseEqualToGgufPy) {
  // gguf-py computes d * level (IQ4_NL) and (d * scale) * level (IQ4_XS) in float32, as our
  // reference does (compiled without FMA contraction): equal bit for bit, signed zeros included.
  for (const FixtureCase& c : kFixtures) {
    const Fixture f = load_fixture(c.file);
    const WeightFormat& format = quant::require_format(c.type);
    ASSERT_EQ(f.ggml_type, uint32_t(c.type)) << c.file;
    ASSERT_EQ(int64_t(f.block_bytes), format.block_bytes) << c.file;
    ASSERT_EQ(int64_t(f.block_size), format.block_size) << c.file;
    const int64_t n = int64_t(f.blocks) * f.block_size;
    const std::vector<float> ours = dequantize(format, f.raw, n);
    const Decoded independent = decode(c.type, f.raw.data(), n);
    for (size_t i = 0; i < ours.size(); ++i) {
      ASSERT_EQ(float_to_bits(ours[i]), float_to_bits(f.gguf_py[i]))
          << c.file << " value " << i << ": ours " << ours[i] << ", gguf-py " << f.gguf_py[i];
      const float expected = independent.step[i] * float(independent.level[i]);
      ASSERT_EQ(float_to_bits(ours[i]), float_to_bits(expected)) << c.file << " value " << i;
    }
  }
}

TEST(IQ4Fixture, TypeIdsNamesAndSizesAreGgmls) {
  EXPECT_EQ(uint32_t(DType::IQ4_NL), 20u);  // ggml.h: GGML_TYPE_IQ4_NL
  EXPECT_EQ(uint32_t(DType::IQ4_XS), 23u);  // GGML_TYPE_IQ4_XS
  EXPECT_EQ(dtype_name(DType::IQ4_NL), "IQ4_NL");
  EXPECT_EQ(dtype_from_name("iq4_xs"), DType::IQ4_XS);
  for (DType type : kTypes) {
    const DTypeLayout layout = dtype_layout(type);
    const WeightFormat& format = quant::require_format(type);
    EXPECT_EQ(layout.block_size, format.block_size) << dtype_name(type);
    EXPECT_EQ(layout.block_bytes, format.block_bytes) << dtype_name(type);
    EXPECT_EQ(layout.row_header_bytes, 0);
  }
  EXPECT_EQ(dtype_row_bytes(DType::IQ4_NL, 256), 8 * 18);
  EXPECT_EQ(dtype_row_bytes(DType::IQ4_XS, 512), 2 * 136);
}

TEST(IQ4Fixture, GgufFileFromGgufPyLoads) {
  // iq4.gguf holds the fixtures' blocks as 8-row matrices (gen_iq_fixtures.py).
  const auto file = gguf::GgufFile::open(std::string(KESTREL_TEST_DATA) + "/quant/iq4.gguf");
  EXPECT_EQ(file->get_uint("general.file_type"), 30u);
  for (const FixtureCase& c : kFixtures) {
    const Fixture f = load_fixture(c.file);
    std::string name = c.file;
    name.replace(name.find(".bin"), 4, ".weight");
    const gguf::TensorInfo* t = file->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, c.type);
    const int64_t n = int64_t(f.blocks) * f.block_size;
    EXPECT_EQ(t->dims, (std::vector<int64_t>{n / 8, 8})) << name;
    ASSERT_EQ(t->num_bytes, f.raw.size()) << name;
    const std::vector<uint8_t> bytes(t->data, t->data + t->num_bytes);
    const std::vector<float> values = dequantize(quant::require_format(c.type), bytes, n);
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(float_to_bits(values[i]), float_to_bits(f.gguf_py[i])) << name << " value " << i;
    }
  }
}

TEST(IQ4Fixture, DotOfRandomBlocksMatchesTheDequantizedDot) {
  // The fixtures' random blocks (every scale code and level) against random activations.
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const FixtureCase& c : kFixtures) {
    const Fixture f = load_fixture(c.file);
    const WeightFormat& format = quant::require_format(c.type);
    const WeightFormat& act = quant::require_format(format.activation_type);
    const int64_t n = 256;  // rows of one super-block (IQ4_XS) or 8 blocks (IQ4_NL)
    const int64_t row_bytes = quant::row_bytes(format, n);
    for (int64_t r = 0; r < int64_t(f.raw.size()) / row_bytes; ++r) {
      const uint8_t* row = f.raw.data() + r * row_bytes;
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = dist(rng);
      std::vector<uint8_t> a(size_t(quant::row_bytes(act, n)));
      act.quantize_row(x.data(), a.data(), n);
      std::vector<float> w_deq(static_cast<size_t>(n)), a_deq(static_cast<size_t>(n));
      format.dequantize_row(row, w_deq.data(), n);
      act.dequantize_row(a.data(), a_deq.data(), n);
      double exact = 0.0, size = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(w_deq[size_t(i)]) * a_deq[size_t(i)];
        size += std::fabs(double(w_deq[size_t(i)]) * a_deq[size_t(i)]);
      }
      const double got = format.vec_dot(row, a.data(), n);
      EXPECT_NEAR(got, exact, (double(n) / double(act.block_size) + 8) * 4 * kU * size + 1e-30)
          << c.file << " row " << r;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Quantizer

std::vector<float> gaussian_row(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(IQ4Quantize, EveryValueIsOnTheNearestLevelOfItsStoredGrid) {
  std::mt19937 rng(11);
  for (DType type : kTypes) {
    const WeightFormat& format = quant::require_format(type);
    for (int trial = 0; trial < 20; ++trial) {
      const int64_t n = 256 * 3;
      std::vector<float> x = gaussian_row(n, rng, std::ldexp(1.0f, trial % 7 - 3));
      if (trial % 4 == 1) std::transform(x.begin(), x.end(), x.begin(), [](float v) { return std::fabs(v); });
      if (trial % 4 == 2) x[size_t(trial)] = 40.0f;                          // an outlier
      if (trial % 4 == 3) std::fill(x.begin(), x.begin() + 64, 0.0f);        // zero groups
      const std::vector<uint8_t> bytes = quantize(format, x);
      const Decoded grid = decode(type, bytes.data(), n);
      const std::vector<float> y = dequantize(format, bytes, n);
      for (int64_t i = 0; i < n; ++i) {
        const double step = grid.step[size_t(i)];
        double nearest = 1e300;
        for (int level : kLevels) nearest = std::min(nearest, std::fabs(step * level - x[size_t(i)]));
        const double got = std::fabs(double(y[size_t(i)]) - x[size_t(i)]);
        ASSERT_LE(got, nearest + 4 * kU * (std::fabs(x[size_t(i)]) + std::fabs(step) * 127))
            << dtype_name(type) << " trial " << trial << " value " << i << " = " << x[size_t(i)];
      }
    }
  }
}

double mse(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>* weights = nullptr) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - b[i];
    e += (weights != nullptr ? (*weights)[i] : 1.0) * d * d;
  }
  return e / double(a.size());
}

TEST(IQ4Quantize, ErrorOnGaussianRowsIsBelowQ4_0) {
  // Same bits per value as Q4_0 (IQ4_NL: 4.5) or fewer (IQ4_XS: 4.25); the levels follow the
  // bell shape, so the error is lower. Measured (ratio to Q4_0's MSE) and printed.
  std::mt19937 rng(5);
  const int64_t n = 256 * 64;
  const std::vector<float> x = gaussian_row(n, rng, 0.02f);
  const WeightFormat& q4_0 = quant::require_format(DType::Q4_0);
  const double base = mse(dequantize(q4_0, quantize(q4_0, x), n), x);
  for (DType type : kTypes) {
    const WeightFormat& format = quant::require_format(type);
    const double e = mse(dequantize(format, quantize(format, x), n), x);
    std::printf("  %s MSE / Q4_0 MSE on Gaussian rows: %.3f\n", std::string(dtype_name(type)).c_str(), e / base);
    EXPECT_LT(e, 0.95 * base) << dtype_name(type);
  }
}

TEST(IQ4Quantize, ImportanceWeightsLowerTheWeightedError) {
  std::mt19937 rng(8);
  const int64_t n = 256 * 32;
  const std::vector<float> x = gaussian_row(n, rng);
  std::vector<float> importance(static_cast<size_t>(n));
  std::uniform_real_distribution<float> spread(0.0f, 1.0f);
  for (float& v : importance) v = std::exp(6.0f * spread(rng));  // spans e^6 between columns
  for (DType type : kTypes) {
    const WeightFormat& format = quant::require_format(type);
    ASSERT_NE(format.quantize_row_weighted, nullptr);
    const double plain = mse(dequantize(format, quantize(format, x), n), x, &importance);
    const double weighted = mse(dequantize(format, quantize(format, x, importance.data()), n), x, &importance);
    std::printf("  %s weighted error with / without importance: %.3f\n", std::string(dtype_name(type)).c_str(),
                weighted / plain);
    EXPECT_LT(weighted, 0.9 * plain) << dtype_name(type);
  }
}

TEST(IQ4Quantize, ZeroRowsQuantizeToZero) {
  for (DType type : kTypes) {
    const WeightFormat& format = quant::require_format(type);
    const std::vector<float> x(512, 0.0f);
    const std::vector<float> y = dequantize(format, quantize(format, x), 512);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(type);
  }
}

TEST(IQ4Quantize, VecDotApproximatesTheOriginalDot) {
  std::mt19937 rng(21);
  for (DType type : kTypes) {
    const WeightFormat& format = quant::require_format(type);
    const WeightFormat& act = quant::require_format(format.activation_type);
    const int64_t n = 2048;
    const std::vector<float> w = gaussian_row(n, rng), x = gaussian_row(n, rng);
    std::vector<uint8_t> a(size_t(quant::row_bytes(act, n)));
    act.quantize_row(x.data(), a.data(), n);
    double exact = 0, norm_w = 0, norm_x = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact += double(w[size_t(i)]) * x[size_t(i)];
      norm_w += double(w[size_t(i)]) * w[size_t(i)];
      norm_x += double(x[size_t(i)]) * x[size_t(i)];
    }
    const double got = format.vec_dot(quantize(format, w).data(), a.data(), n);
    // 4-bit weights (relative RMS error < 0.12) and 8-bit activations: a few percent of |w||x|.
    EXPECT_NEAR(got, exact, 0.15 * std::sqrt(norm_w * norm_x)) << dtype_name(type);
  }
}

}  // namespace
}  // namespace kestrel
