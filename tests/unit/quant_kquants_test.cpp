// k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K weights; Q8_K activations):
//  - blocks written by llama.cpp's llama-quantize dequantize bitwise like gguf-py's numpy code
//    (fixtures from scripts/gen_quant_fixtures.py);
//  - our quantizer's squared error on the same values is no worse than llama.cpp's;
//  - on random rows every value lands on the nearest level of the grid its block stores, and the
//    error is no worse than plain min/max rounding per sub-block;
//  - vec_dot equals the double-precision dot of the dequantized rows within a rounding bound, and
//    approximates the dot of the original floats within the quantization bounds.
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
#include "quant_fixture.h"

namespace kestrel {
namespace {

using quant::WeightFormat;

constexpr double kU = 0x1p-24;  // unit roundoff of float
constexpr int kQK = 256;

const DType kWeightTypes[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// ---------------------------------------------------------------------------------------------
// An independent decoding of the block headers (written from the GGUF spec's description, not
// from the code under test): for each of the 256 values, the step and offset of its sub-block's
// grid, value = step * q + offset with q in [0, qmax] (Q6_K: q in [-32, 31], Q3_K: q in [-4, 3],
// offset 0).

struct Grid {
  std::vector<double> step, offset;
  double qmin = 0, qmax = 0;
};

Grid decode_grid(DType type, const uint8_t* block) {
  Grid g;
  g.step.resize(kQK);
  g.offset.resize(kQK);
  uint16_t h0, h1;
  if (type == DType::Q2_K) {
    // scales[16] (low nibble: scale code, high nibble: min code), qs[64], d, dmin.
    std::memcpy(&h0, block + 80, 2);
    std::memcpy(&h1, block + 82, 2);
    const double d = fp16_to_float(h0), dmin = fp16_to_float(h1);
    for (int j = 0; j < 16; ++j) {
      for (int i = 16 * j; i < 16 * j + 16; ++i) g.step[i] = d * (block[j] & 15), g.offset[i] = -dmin * (block[j] >> 4);
    }
    g.qmax = 3;
    return g;
  }
  if (type == DType::Q3_K) {
    // hmask[32], qs[64], scales[12], d: 16 signed 6-bit scale codes (stored + 32), the low 4 bits of
    // code j in byte j % 8 (low nibble for j < 8, high for j >= 8), the top 2 in byte 8 + j % 4.
    std::memcpy(&h0, block + 108, 2);
    const double d = fp16_to_float(h0);
    const uint8_t* s = block + 96;
    for (int j = 0; j < 16; ++j) {
      const int code = ((s[j % 8] >> (j < 8 ? 0 : 4)) & 15) | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
      for (int i = 16 * j; i < 16 * j + 16; ++i) g.step[i] = d * (code - 32), g.offset[i] = 0.0;
    }
    g.qmin = -4, g.qmax = 3;
    return g;
  }
  if (type == DType::Q6_K) {
    std::memcpy(&h0, block + 208, 2);
    const double d = fp16_to_float(h0);
    const int8_t* scales = reinterpret_cast<const int8_t*>(block + 192);
    for (int i = 0; i < kQK; ++i) g.step[i] = d * scales[i / 16], g.offset[i] = 0.0;
    g.qmin = -32, g.qmax = 31;
    return g;
  }
  std::memcpy(&h0, block, 2);
  std::memcpy(&h1, block + 2, 2);
  const double d = fp16_to_float(h0), dmin = fp16_to_float(h1);
  const uint8_t* s = block + 4;
  for (int j = 0; j < 8; ++j) {
    // Bytes 0-3: scale bits 0-5 of j<4 (bits 6-7: scale bits 4-5 of j+4); 4-7: same for mins;
    // 8-11: low nibble scale, high nibble min (bits 0-3) of j+4.
    const int sc = j < 4 ? (s[j] & 63) : ((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    const int mn = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    for (int i = 32 * j; i < 32 * j + 32; ++i) g.step[i] = d * sc, g.offset[i] = -dmin * mn;
  }
  g.qmax = type == DType::Q4_K ? 15 : 31;
  return g;
}

// Largest error value i may have if it was put on the nearest level of its stored grid: half a
// step inside the grid's range, the distance to the end level outside it, plus float slack for
// the assignment (x + m) * (1/step) and the dequantization step * q - m (a few ulp of the terms).
double nearest_level_bound(const Grid& g, int i, double x) {
  const double lo = g.offset[i] + g.step[i] * g.qmin, hi = g.offset[i] + g.step[i] * g.qmax;
  const double a = std::min(lo, hi), b = std::max(lo, hi);
  const double outside = std::max({0.0, a - x, x - b});
  return std::fabs(g.step[i]) * (0.5 + 1e-5) + outside +
         4 * kU * (std::fabs(x) + std::fabs(g.offset[i]) + std::fabs(b) + std::fabs(a));
}

std::vector<uint8_t> quantize(const WeightFormat& f, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(size_t(quant::row_bytes(f, int64_t(x.size()))));
  f.quantize_row(x.data(), bytes.data(), int64_t(x.size()));
  return bytes;
}

std::vector<float> dequantize(const WeightFormat& f, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  f.dequantize_row(bytes.data(), out.data(), n);
  return out;
}

// sum (a - b)^2 over [begin, end), each term weighted by |b|^power (b the original values): power 2
// is the error Q3_K's and Q6_K's quantizers (llama.cpp's and Kestrel's) minimise without an imatrix,
// power 1 the weighting of Q2_K's (Kestrel's squared error, llama.cpp's absolute one).
double squared_error(const std::vector<float>& a, const std::vector<float>& b, size_t begin, size_t end,
                     int power = 0) {
  double e = 0;
  for (size_t i = begin; i < end; ++i) {
    e += std::pow(std::fabs(double(b[i])), power) * (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  }
  return e;
}

// sum (a - b)^2 over [begin, end) weighted as Q4_K's and Q5_K's quantizers (llama.cpp's
// quantize_row_q4_K_ref and Kestrel's) weigh it without an imatrix: per sub-block of 32 values,
// its RMS plus |b|. begin is a multiple of 32.
double rms_plus_abs_error(const std::vector<float>& a, const std::vector<float>& b, size_t begin, size_t end) {
  double e = 0;
  for (size_t s = begin; s < end; s += 32) {
    double sum_b2 = 0;
    for (size_t i = s; i < s + 32; ++i) sum_b2 += double(b[i]) * b[i];
    const double rms = std::sqrt(sum_b2 / 32.0);
    for (size_t i = s; i < s + 32; ++i) e += (rms + std::fabs(double(b[i]))) * (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  }
  return e;
}

// ---------------------------------------------------------------------------------------------
// Fixtures written by llama.cpp

using Fixture = test::QuantFixture;

Fixture load_fixture(const std::string& name) { return test::read_quant_fixture(name, kQK); }

struct FixtureCase {
  const char* file;
  DType type;
};
const FixtureCase kFixtures[] = {
    {"q3_k.bin", DType::Q3_K}, {"q4_k.bin", DType::Q4_K}, {"q5_k.bin", DType::Q5_K}, {"q6_k.bin", DType::Q6_K},
    {"q2_k.bin", DType::Q2_K}};

TEST(KQuantFixture, DequantizeIsBitwiseEqualToGgufPy) {
  // gguf-py computes (d * scale) * q - dmin * min in float32, the same operations in the same
  // order as our reference (which is compiled without FMA contraction): equal bit for bit.
  for (const FixtureCase& c : kFixtures) {
    const Fixture f = load_fixture(c.file);
    const WeightFormat& format = quant::require_format(c.type);
    ASSERT_EQ(f.ggml_type, uint32_t(c.type)) << c.file;
    ASSERT_EQ(int64_t(f.block_bytes), format.block_bytes) << c.file;
    ASSERT_EQ(f.blocks, 8u);
    const std::vector<float> ours = dequantize(format, f.raw, int64_t(f.blocks) * kQK);
    for (size_t i = 0; i < ours.size(); ++i) {
      ASSERT_EQ(float_to_bits(ours[i]), float_to_bits(f.gguf_py[i]))
          << c.file << " value " << i << ": ours " << ours[i] << ", gguf-py " << f.gguf_py[i];
    }
  }
}

TEST(KQuantFixture, QuantizerIsNoWorseThanLlamaCpp) {
  // Same input values, the error of our blocks vs llama.cpp's (quantize_row_*_ref without an
  // importance matrix), weighted as both quantizers weigh it without an imatrix: Q4_K/Q5_K by the
  // sub-block's RMS plus |x|, Q3_K/Q6_K by x^2, Q2_K by |x| (Kestrel minimises the weighted squared
  // error, llama.cpp the weighted absolute one). The fixture rows are: all positive, Laplace, one
  // outlier, sparse, constant, tiny (subnormal F16 scales), normal, large with an offset. Over the
  // 8 blocks ours must be lower (its searches try more grids than llama.cpp's), and no single block
  // may be more than 10% worse (Q6_K: 15%, below).
  for (const FixtureCase& c : kFixtures) {
    const Fixture f = load_fixture(c.file);
    const WeightFormat& format = quant::require_format(c.type);
    const std::vector<float> ours = dequantize(format, quantize(format, f.original), int64_t(f.blocks) * kQK);
    const auto error = [&](const std::vector<float>& a, size_t begin, size_t end) {
      if (c.type == DType::Q4_K || c.type == DType::Q5_K) return rms_plus_abs_error(a, f.original, begin, end);
      const int power = c.type == DType::Q2_K ? 1 : 2;
      return squared_error(a, f.original, begin, end, power);
    };
    // Q6_K's x^2-weighted error on the sparse block rests on its few non-zero values, and its
    // super-block scale is the largest sub-block scale over 127 where llama.cpp's is over -128:
    // 13.5% above llama.cpp's on that block (and below it over the 8).
    const double per_block_bound = c.type == DType::Q6_K ? 1.15 : 1.10;
    double ours_total = 0, theirs_total = 0;
    for (uint32_t b = 0; b < f.blocks; ++b) {
      const double e_ours = error(ours, b * kQK, (b + 1) * kQK);
      const double e_theirs = error(f.gguf_py, b * kQK, (b + 1) * kQK);
      ours_total += e_ours;
      theirs_total += e_theirs;
      EXPECT_LE(e_ours, e_theirs * per_block_bound + 1e-12) << c.file << " block " << b;
    }
    EXPECT_LT(ours_total, theirs_total) << c.file;
    RecordProperty(std::string(c.file) + "_mse_ratio", std::to_string(ours_total / theirs_total));
  }
}

// ---------------------------------------------------------------------------------------------
// Round trip on random rows

std::vector<float> random_row(std::mt19937& rng, int64_t n, int kind) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float v = normal(rng);
    switch (kind % 5) {
      case 0: x[size_t(i)] = 0.02f * v; break;
      case 1: x[size_t(i)] = 300.0f * v; break;                           // large
      case 2: x[size_t(i)] = 0.7f * v + (i % 256 == 17 ? 30.0f : 0.0f); break;  // outliers
      case 3: x[size_t(i)] = 0.01f * std::fabs(v) + 0.1f; break;          // all positive
      default: x[size_t(i)] = (i / 32) % 3 == 0 ? 0.0f : v; break;        // zero sub-blocks
    }
  }
  return x;
}

// Plain min/max rounding per sub-block with the scales kept in float: what a search must beat.
double minmax_squared_error(DType type, const std::vector<float>& x) {
  const bool symmetric = type == DType::Q6_K || type == DType::Q3_K;
  const int sub = symmetric || type == DType::Q2_K ? 16 : 32;
  double e = 0;
  for (size_t s = 0; s < x.size(); s += size_t(sub)) {
    float lo = 0, hi = x[s], amax = 0;
    for (size_t i = s; i < s + size_t(sub); ++i) {
      lo = std::min(lo, x[i]), hi = std::max(hi, x[i]), amax = std::max(amax, std::fabs(x[i]));
    }
    for (size_t i = s; i < s + size_t(sub); ++i) {
      double v;
      if (symmetric) {
        const double step = amax / (type == DType::Q6_K ? 31.0 : 3.0);
        v = step == 0 ? 0 : step * std::round(x[i] / step);
      } else {
        const double step = (double(hi) - lo) / (type == DType::Q2_K ? 3 : type == DType::Q4_K ? 15 : 31);
        v = step == 0 ? lo : lo + step * std::round((x[i] - lo) / step);
      }
      e += (v - x[i]) * (v - x[i]);
    }
  }
  return e;
}

TEST(KQuant, RoundTripPutsEveryValueOnItsNearestStoredLevel) {
  std::mt19937 rng(11);
  for (DType type : kWeightTypes) {
    const WeightFormat& format = quant::require_format(type);
    for (int64_t n : {int64_t(kQK), int64_t(3 * kQK)}) {
      for (int row = 0; row < 5; ++row) {  // an odd number of rows, each of another kind
        const std::vector<float> x = random_row(rng, n, row);
        const std::vector<uint8_t> q = quantize(format, x);
        const std::vector<float> y = dequantize(format, q, n);
        for (int64_t b = 0; b < n / kQK; ++b) {
          const Grid g = decode_grid(type, q.data() + b * format.block_bytes);
          for (int i = 0; i < kQK; ++i) {
            const size_t k = size_t(b * kQK + i);
            const double err = std::fabs(double(y[k]) - x[k]);
            ASSERT_LE(err, nearest_level_bound(g, i, x[k]))
                << dtype_name(type) << " n=" << n << " row=" << row << " i=" << k;
          }
        }
        // The search (and the 6-bit / int8 scale codes) must not lose to plain min/max rounding
        // with exact float scales by more than 3% (scale codes cost a little; the search gains).
        EXPECT_LE(squared_error(y, x, 0, x.size()), 1.03 * minmax_squared_error(type, x) + 1e-30)
            << dtype_name(type) << " n=" << n << " row=" << row;
      }
    }
  }
}

TEST(KQuant, ZeroAndConstantBlocks) {
  for (DType type : kWeightTypes) {
    const WeightFormat& format = quant::require_format(type);
    const std::vector<float> zero(kQK, 0.0f);
    for (float v : dequantize(format, quantize(format, zero), kQK)) EXPECT_EQ(v, 0.0f) << dtype_name(type);
    // A constant block is one level (Q4_K/Q5_K: the min; Q6_K: the extreme -> -32 or 31 levels).
    const std::vector<float> constant(kQK, -0.375f);
    for (float v : dequantize(format, quantize(format, constant), kQK)) {
      EXPECT_NEAR(v, -0.375f, 0.375f * 0x1p-10) << dtype_name(type);  // F16 scale rounding
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Q8_K activations and vec_dot

TEST(KQuant, Q8KActivationLayout) {
  const WeightFormat& q8k = quant::require_format(DType::Q8_K);
  std::mt19937 rng(5);
  const std::vector<float> x = random_row(rng, 2 * kQK, 2);
  const std::vector<uint8_t> bytes = quantize(q8k, x);
  for (int b = 0; b < 2; ++b) {
    quant::BlockQ8_K block;
    std::memcpy(&block, bytes.data() + b * sizeof block, sizeof block);
    float amax = 0;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[size_t(b * kQK + i)]));
    EXPECT_EQ(block.d, amax / 127.0f);
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += block.qs[g * 16 + i];
      EXPECT_EQ(block.bsums[g], sum);
    }
    for (int i = 0; i < kQK; ++i) {
      const double v = x[size_t(b * kQK + i)];
      EXPECT_LE(std::fabs(block.d * double(block.qs[i]) - v), block.d * (0.5 + 1e-5)) << i;
    }
  }
}

TEST(KQuant, VecDotMatchesDequantizedDotAndApproximatesOriginal) {
  std::mt19937 rng(3);
  const WeightFormat& q8k = quant::require_format(DType::Q8_K);
  for (DType type : kWeightTypes) {
    const WeightFormat& format = quant::require_format(type);
    EXPECT_EQ(format.activation_type, DType::Q8_K);
    for (int64_t n : {int64_t(kQK), int64_t(3 * kQK)}) {
      for (int trial = 0; trial < 10; ++trial) {
        const std::vector<float> w = random_row(rng, n, trial);
        const std::vector<float> a = random_row(rng, n, trial + 2);
        const std::vector<uint8_t> qw = quantize(format, w), qa = quantize(q8k, a);
        const std::vector<float> dw = dequantize(format, qw, n), da = dequantize(q8k, qa, n);
        const float got = format.vec_dot(qw.data(), qa.data(), n);

        // Rounding bound: integer sums are exact; per block at most ~4 float roundings of terms
        // bounded by sum (|step q| + |offset|) |a'|, then n/256 block sums; the dequantized values
        // themselves carry <= 3 roundings. With |step q| <= |w'| + |offset|:
        // |got - sum w'a'| <= (n/256 + 8) u sum (|w'| + 2|offset|) |a'|.
        double exact = 0, magnitude = 0, original = 0, quant_tol = 0;
        for (int64_t b = 0; b < n / kQK; ++b) {
          const Grid g = decode_grid(type, qw.data() + b * format.block_bytes);
          float amax = 0;
          for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(a[size_t(b * kQK + i)]));
          for (int i = 0; i < kQK; ++i) {
            const size_t k = size_t(b * kQK + i);
            exact += double(dw[k]) * da[k];
            magnitude += (std::fabs(dw[k]) + 2 * std::fabs(g.offset[i])) * std::fabs(da[k]);
            original += double(w[k]) * a[k];
            // |w a - w' a'| <= |w| |a - a'| + |a'| |w - w'|, each error by its layout bound.
            quant_tol += std::fabs(w[k]) * (amax / 127.0 * (0.5 + 1e-5)) +
                         std::fabs(da[k]) * nearest_level_bound(g, i, w[k]);
          }
        }
        const double kernel_tol = (double(n) / kQK + 8) * kU * magnitude + 1e-30;
        EXPECT_NEAR(got, exact, kernel_tol) << dtype_name(type) << " n=" << n << " trial " << trial;
        EXPECT_NEAR(got, original, quant_tol + kernel_tol) << dtype_name(type) << " n=" << n;
      }
    }
  }
}

TEST(KQuant, TableEntriesMatchGgufLayouts) {
  for (DType type : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K}) {
    const WeightFormat& f = quant::require_format(type);
    EXPECT_EQ(f.block_size, 256);
    EXPECT_EQ(f.block_bytes, dtype_layout(type).block_bytes) << dtype_name(type);
    EXPECT_EQ(f.row_header_bytes, 0);
    EXPECT_EQ(quant::row_bytes(f, 3 * kQK), 3 * f.block_bytes);
  }
  EXPECT_EQ(quant::require_format(DType::Q8_K).activation_type, DType::Q8_K);
}

}  // namespace
}  // namespace kestrel
