// llama.cpp's 3-bit grid formats IQ3_XXS and IQ3_S (Q8_K activations):
//  - random valid blocks, using every grid entry, dequantize bitwise like gguf-py's numpy code
//    (fixtures from scripts/gen_iq_fixtures.py) and like an independent decoding written from the
//    layout; the sign table is the parity table it claims to be;
//  - the DType ids, names and sizes are GGML's, and a GGUF file gguf-py wrote with both types
//    loads with the right shapes and the same values;
//  - the quantizer (without an imatrix) stores every group of 4 on the grid entry nearest to its
//    values at the stored step and signs (checked by brute force over the whole grid), signs are
//    the values' own except IQ3_XXS's one parity flip per 8 values, which is the best single flip;
//  - on Gaussian rows its error is below Q3_K's (IQ3_S: the same 3.44 bits per value) and below a
//    3.5-bit uniform quantizer's (IQ3_XXS: 3.06 bits);
//  - importance weights lower the weighted error; zero rows stay zero;
//  - vec_dot equals the double-precision dot of the dequantized rows within a rounding bound.
// The SIMD kernels are checked against these references in backend_ops_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "loader/gguf_reader.h"
#include "quant/format.h"
#include "quant/iq3_grids.h"
#include "quant_fixture.h"

namespace kestrel {
namespace {

using quant::WeightFormat;

constexpr double kU = 0x1p-24;  // unit roundoff of float
const DType kTypes[] = {DType::IQ3_XXS, DType::IQ3_S};

// ---------------------------------------------------------------------------------------------
// An independent decoding from llama.cpp's block_iq3_xxs / block_iq3_s: per group of 4 values its
// step (the float the grid value is multiplied by), its grid entry, and per value its sign.

struct Decoded {
  std::vector<float> step;  // per value
  std::vector<int> entry;   // per group of 4
  std::vector<bool> negative;
};

uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

Decoded decode(DType type, const uint8_t* row, int64_t n) {
  Decoded out;
  for (int64_t b = 0; b < n / 256; ++b) {
    uint16_t h;
    if (type == DType::IQ3_XXS) {  // d, qs[64], then 8 uint32: 4 x 7 sign bits, 4-bit scale
      const uint8_t* block = row + b * 98;
      std::memcpy(&h, block, 2);
      for (int j = 0; j < 8; ++j) {
        const uint32_t word = u32_at(block + 66 + 4 * j);
        const float step = fp16_to_float(h) * (0.5f + float(word >> 28)) * 0.5f;
        for (int k = 0; k < 8; ++k) out.entry.push_back(block[2 + 8 * j + k]);
        for (int l = 0; l < 4; ++l) {
          const uint32_t seven = word >> (7 * l) & 127;
          const bool odd = __builtin_popcount(seven) % 2 != 0;  // the eighth sign restores parity
          for (int i = 0; i < 8; ++i) {
            out.step.push_back(step);
            out.negative.push_back(i < 7 ? (seven >> i & 1) != 0 : odd);
          }
        }
      }
    } else {  // d, qs[64], qh[8], signs[32], scales[4]
      const uint8_t* block = row + b * 110;
      std::memcpy(&h, block, 2);
      for (int j = 0; j < 8; ++j) {
        const int code = block[106 + j / 2] >> (j % 2 == 0 ? 0 : 4) & 15;
        const float step = fp16_to_float(h) * float(1 + 2 * code);
        for (int k = 0; k < 8; ++k) out.entry.push_back(block[2 + 8 * j + k] | (block[66 + j] >> k & 1) << 8);
        for (int i = 0; i < 32; ++i) {
          out.step.push_back(step);
          out.negative.push_back((block[74 + 4 * j + i / 8] >> (i % 8) & 1) != 0);
        }
      }
    }
  }
  return out;
}

// Grid value i (0..3) of entry e.
int grid(DType type, int e, int i) {
  return int((type == DType::IQ3_XXS ? quant::kIQ3XXSGrid : quant::kIQ3SGrid)[e] >> (8 * i) & 0xff);
}
int grid_size(DType type) { return type == DType::IQ3_XXS ? 256 : 512; }

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

struct FixtureCase {
  const char* file;
  DType type;
};
const FixtureCase kFixtures[] = {{"iq3_xxs.bin", DType::IQ3_XXS}, {"iq3_s.bin", DType::IQ3_S}};

TEST(IQ3Fixture, DequantizeIsBitwiseEqualToGgufPy) {
  // gguf-py computes (d * (0.5 + s)) * 0.5 or d * (1 + 2 s), times the grid value, times +-1, in
  // float32, as our reference does: equal bit for bit, signed zeros included. The fixtures use
  // every grid entry in blocks with a nonzero scale, so this also checks the grid tables.
  for (const FixtureCase& c : kFixtures) {
    const test::QuantFixture f = test::read_quant_fixture(c.file);
    const WeightFormat& format = quant::require_format(c.type);
    ASSERT_EQ(f.ggml_type, uint32_t(c.type)) << c.file;
    ASSERT_EQ(int64_t(f.block_bytes), format.block_bytes) << c.file;
    ASSERT_EQ(int64_t(f.block_size), format.block_size) << c.file;
    const int64_t n = int64_t(f.blocks) * f.block_size;
    const std::vector<float> ours = dequantize(format, f.raw, n);
    const Decoded independent = decode(c.type, f.raw.data(), n);
    std::vector<bool> seen(size_t(grid_size(c.type)), false);
    for (size_t i = 0; i < ours.size(); ++i) {
      ASSERT_EQ(float_to_bits(ours[i]), float_to_bits(f.gguf_py[i]))
          << c.file << " value " << i << ": ours " << ours[i] << ", gguf-py " << f.gguf_py[i];
      const float magnitude = independent.step[i] * float(grid(c.type, independent.entry[i / 4], int(i % 4)));
      const float expected = independent.negative[i] ? -magnitude : magnitude;
      ASSERT_EQ(float_to_bits(ours[i]), float_to_bits(expected)) << c.file << " value " << i;
      if (independent.step[i] != 0.0f) seen[size_t(independent.entry[i / 4])] = true;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), grid_size(c.type)) << c.file;
  }
}

TEST(IQ3Fixture, SignTableIsTheEvenParityTable) {
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(quant::kIQ3Signs[i], uint8_t(i | (__builtin_popcount(unsigned(i)) % 2) << 7)) << i;
  }
}

TEST(IQ3Fixture, TypeIdsNamesAndSizesAreGgmls) {
  EXPECT_EQ(uint32_t(DType::IQ3_XXS), 18u);  // ggml.h: GGML_TYPE_IQ3_XXS
  EXPECT_EQ(uint32_t(DType::IQ3_S), 21u);    // GGML_TYPE_IQ3_S
  EXPECT_EQ(dtype_name(DType::IQ3_XXS), "IQ3_XXS");
  EXPECT_EQ(dtype_from_name("iq3_s"), DType::IQ3_S);
  for (DType type : kTypes) {
    const DTypeLayout layout = dtype_layout(type);
    const WeightFormat& format = quant::require_format(type);
    EXPECT_EQ(layout.block_size, format.block_size) << dtype_name(type);
    EXPECT_EQ(layout.block_bytes, format.block_bytes) << dtype_name(type);
    EXPECT_EQ(format.activation_type, DType::Q8_K);
  }
  EXPECT_EQ(dtype_row_bytes(DType::IQ3_XXS, 512), 2 * 98);
  EXPECT_EQ(dtype_row_bytes(DType::IQ3_S, 512), 2 * 110);
}

TEST(IQ3Fixture, GgufFileFromGgufPyLoads) {
  // iq3.gguf holds the fixtures' blocks as 8-row matrices (gen_iq_fixtures.py).
  const auto file = gguf::GgufFile::open(std::string(KESTREL_TEST_DATA) + "/quant/iq3.gguf");
  EXPECT_EQ(file->get_uint("general.file_type"), 26u);  // LLAMA_FTYPE_MOSTLY_IQ3_S
  for (const FixtureCase& c : kFixtures) {
    const test::QuantFixture f = test::read_quant_fixture(c.file);
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

TEST(IQ3Fixture, DotOfRandomBlocksMatchesTheDequantizedDot) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const FixtureCase& c : kFixtures) {
    const test::QuantFixture f = test::read_quant_fixture(c.file);
    const WeightFormat& format = quant::require_format(c.type);
    const WeightFormat& act = quant::require_format(format.activation_type);
    const int64_t n = 512;
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
      EXPECT_NEAR(got, exact, 16 * 4 * kU * size + 1e-30) << c.file << " row " << r;
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

// Squared error of group g (values 4g .. 4g + 3 of x) stored as `entry` with the decoded signs.
double group_error(DType type, const std::vector<float>& x, const Decoded& q, int64_t g, int entry,
                   uint32_t extra_flip = 0) {
  double e = 0.0;
  for (int i = 0; i < 4; ++i) {
    const size_t v = size_t(4 * g + i);
    const bool negative = q.negative[v] != ((extra_flip >> i & 1) != 0);
    const double value = double(q.step[v]) * grid(type, entry, i) * (negative ? -1.0 : 1.0);
    e += (value - x[v]) * (value - x[v]);
  }
  return e;
}

// The least error of group g over every grid entry (signs as decoded, some flipped).
double best_group_error(DType type, const std::vector<float>& x, const Decoded& q, int64_t g, uint32_t flip = 0) {
  double best = 1e300;
  for (int e = 0; e < grid_size(type); ++e) best = std::min(best, group_error(type, x, q, g, e, flip));
  return best;
}

TEST(IQ3Quantize, EveryGroupIsOnTheNearestEntryAndSignsAreTheValuesOwn) {
  std::mt19937 rng(11);
  for (DType type : kTypes) {
    const WeightFormat& format = quant::require_format(type);
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t n = 256 * 2;
      std::vector<float> x = gaussian_row(n, rng, std::ldexp(1.0f, trial % 7 - 3));
      if (trial % 3 == 1) x[size_t(trial)] = 40.0f * std::ldexp(1.0f, trial % 7 - 3);  // an outlier
      if (trial % 3 == 2) std::fill(x.begin() + 64, x.begin() + 96, 0.0f);          // a zero sub-block
      const std::vector<uint8_t> bytes = quantize(format, x);
      const Decoded q = decode(type, bytes.data(), n);
      for (int64_t g = 0; g < n / 4; ++g) {
        const double got = group_error(type, x, q, g, q.entry[size_t(g)]);
        const double slack = 1e-5 * (got + double(q.step[size_t(4 * g)]) * q.step[size_t(4 * g)]);
        ASSERT_LE(got, best_group_error(type, x, q, g) + slack) << dtype_name(type) << " trial " << trial << " group " << g;
      }
      // Signs: the values' own (zeros positive); IQ3_XXS flips one per 8 values with an odd
      // number of negative values, the flip whose two groups, each on its nearest entry, have the
      // least error.
      for (int64_t h = 0; h < n / 8; ++h) {
        int negatives = 0, mismatches = 0;
        for (int64_t v = 8 * h; v < 8 * h + 8; ++v) {
          negatives += x[size_t(v)] < 0.0f;
          mismatches += (x[size_t(v)] < 0.0f) != q.negative[size_t(v)];
        }
        const int expected = type == DType::IQ3_XXS ? negatives % 2 : 0;
        ASSERT_EQ(mismatches, expected) << dtype_name(type) << " trial " << trial << " half-group " << h;
        if (mismatches == 0) continue;
        const double got = best_group_error(type, x, q, 2 * h) + best_group_error(type, x, q, 2 * h + 1);
        for (int i = 0; i < 8; ++i) {  // un-flip the stored flip and flip value i instead
          uint32_t flip[2] = {0, 0};
          for (int v = 0; v < 8; ++v) {
            const bool own = x[size_t(8 * h + v)] < 0.0f;
            const bool wanted = v == i ? !own : own;
            if (wanted != q.negative[size_t(8 * h + v)]) flip[v / 4] |= 1u << (v % 4);
          }
          const double other = best_group_error(type, x, q, 2 * h, flip[0]) + best_group_error(type, x, q, 2 * h + 1, flip[1]);
          ASSERT_LE(got, other * (1 + 1e-5) + 1e-30) << "trial " << trial << " half-group " << h << " flip " << i;
        }
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

// A 3.5-bit baseline: per 32 values an F16 step d = amax / 4 and levels d * {-4, ..., 3}, rounded.
std::vector<float> uniform_3bit(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0.0f;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = fp16_to_float(float_to_fp16(amax / 4.0f));
    for (size_t i = b; i < b + 32; ++i) y[i] = d > 0 ? d * std::clamp(std::round(x[i] / d), -4.0f, 3.0f) : 0.0f;
  }
  return y;
}

TEST(IQ3Quantize, ErrorOnGaussianRowsIsBelowTheBaselines) {
  std::mt19937 rng(5);
  const int64_t n = 256 * 32;
  const std::vector<float> x = gaussian_row(n, rng, 0.02f);
  const WeightFormat& q3_k = quant::require_format(DType::Q3_K);
  const double q3k = mse(dequantize(q3_k, quantize(q3_k, x), n), x);
  const double uniform = mse(uniform_3bit(x), x);
  for (DType type : kTypes) {
    const WeightFormat& format = quant::require_format(type);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<uint8_t> bytes = quantize(format, x);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double e = mse(dequantize(format, bytes, n), x);
    std::printf("  %s MSE / Q3_K: %.3f, / uniform 3.5-bit: %.3f (quantized at %.2f M values/s)\n",
                std::string(dtype_name(type)).c_str(), e / q3k, e / uniform, double(n) / seconds / 1e6);
    EXPECT_LT(e, 0.95 * uniform) << dtype_name(type);
    if (type == DType::IQ3_S) {
      EXPECT_LT(e, 0.95 * q3k);
    }
  }
}

TEST(IQ3Quantize, ImportanceWeightsLowerTheWeightedError) {
  std::mt19937 rng(8);
  const int64_t n = 256 * 16;
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

TEST(IQ3Quantize, ZeroRowsQuantizeToZero) {
  for (DType type : kTypes) {
    const WeightFormat& format = quant::require_format(type);
    const std::vector<float> x(512, 0.0f);
    const std::vector<float> y = dequantize(format, quantize(format, x), 512);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(type);
  }
}

TEST(IQ3Quantize, VecDotApproximatesTheOriginalDot) {
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
    // 3-bit weights (relative RMS error < 0.25) and 8-bit activations.
    EXPECT_NEAR(got, exact, 0.25 * std::sqrt(norm_w * norm_x)) << dtype_name(type);
  }
}

}  // namespace
}  // namespace kestrel
