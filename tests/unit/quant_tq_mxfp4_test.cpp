// llama.cpp's ternary formats TQ1_0 / TQ2_0 (Q8_K activations) and MXFP4 (Q8_0 activations):
//  - random valid blocks dequantize bitwise like gguf-py's numpy code (fixtures from
//    scripts/gen_tq_mxfp4_fixtures.py: TQ1_0's base-3 bytes, TQ2_0's code 3, MXFP4's E8M0
//    exponents 0, 1, 254, 255 included), and like an independent decoding written from the layout;
//  - the DType ids, names and sizes are GGML's, and a GGUF file gguf-py wrote with the three types
//    loads with the right shapes and values;
//  - the quantizers write the bytes gguf-py's quantize writes, and round-trip exactly
//    representable rows exactly;
//  - vec_dot equals the double-precision dot of the dequantized rows within a rounding bound.
// The SIMD kernels are checked against these references in backend_ops_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "loader/gguf_reader.h"
#include "quant/format.h"
#include "quant_fixture.h"

namespace kestrel {
namespace {

using quant::WeightFormat;

constexpr double kU = 0x1p-24;  // unit roundoff of float
constexpr int kMxfp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// ---------------------------------------------------------------------------------------------
// An independent decoding (from llama.cpp's block_tq1_0 / block_tq2_0 / block_mxfp4): per element
// its scale and its level, so that value = scale * level.

struct Decoded {
  std::vector<float> scale;
  std::vector<int> level;
};

// Trit n of a TQ1_0 byte b, read as the 5-trit number floor(b * 243 / 256) it rounds up from:
// digit n (most significant first) is floor(b * 3^(n+1) / 256) mod 3.
int trit(int b, int n) {
  int p = 3;
  for (int i = 0; i < n; ++i) p *= 3;
  return (b * p / 256) % 3;
}

Decoded decode(DType type, const uint8_t* row, int64_t n) {
  Decoded out;
  if (type == DType::MXFP4) {  // e, then 16 bytes: element j low nibble, j + 16 high nibble
    for (int64_t b = 0; b < n / 32; ++b) {
      const uint8_t* block = row + b * 17;
      // 2^(e - 128): exact in double, then in float (subnormal for e = 0, 1; 2^127 for 255).
      const float scale = float(std::ldexp(1.0, int(block[0]) - 128));
      for (int i = 0; i < 32; ++i) {
        out.scale.push_back(scale);
        out.level.push_back(kMxfp4Levels[i < 16 ? block[1 + i] & 15 : block[1 + i - 16] >> 4]);
      }
    }
    return out;
  }
  const int64_t block_bytes = type == DType::TQ1_0 ? 54 : 66;
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* block = row + b * block_bytes;
    const float d = fp16_to_float(u16_at(block + block_bytes - 2));
    std::vector<int> levels(256);
    if (type == DType::TQ2_0) {  // byte 32h + m, bits 2l: value 128h + 32l + m
      for (int h = 0; h < 2; ++h) {
        for (int l = 0; l < 4; ++l) {
          for (int m = 0; m < 32; ++m) levels[size_t(128 * h + 32 * l + m)] = ((block[32 * h + m] >> (2 * l)) & 3) - 1;
        }
      }
    } else {  // 32 bytes x 5 trits, 16 bytes x 5 trits, 4 bytes x 4 trits
      for (int m = 0; m < 32; ++m) {
        for (int t = 0; t < 5; ++t) levels[size_t(32 * t + m)] = trit(block[m], t) - 1;
      }
      for (int m = 0; m < 16; ++m) {
        for (int t = 0; t < 5; ++t) levels[size_t(160 + 16 * t + m)] = trit(block[32 + m], t) - 1;
      }
      for (int j = 0; j < 4; ++j) {
        for (int t = 0; t < 4; ++t) levels[size_t(240 + 4 * t + j)] = trit(block[48 + j], t) - 1;
      }
    }
    for (int i = 0; i < 256; ++i) {
      out.scale.push_back(d);
      out.level.push_back(levels[size_t(i)]);
    }
  }
  return out;
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

struct FixtureCase {
  const char* name;  // tests/data/quant/NAME.bin, NAME_quant.bin; NAME.weight in the GGUF
  DType type;
};
const FixtureCase kCases[] = {{"tq1_0", DType::TQ1_0}, {"tq2_0", DType::TQ2_0}, {"mxfp4", DType::MXFP4}};

// ---------------------------------------------------------------------------------------------
// gguf-py fixtures

TEST(TqMxfp4Fixture, DequantizeIsBitwiseEqualToGgufPy) {
  // gguf-py computes d * level in float32, as our reference does: equal bit for bit, signed
  // zeros and MXFP4's infinities (e = 255) included.
  for (const FixtureCase& c : kCases) {
    const test::QuantFixture f = test::read_quant_fixture(std::string(c.name) + ".bin");
    const WeightFormat& format = quant::require_format(c.type);
    ASSERT_EQ(f.ggml_type, uint32_t(c.type)) << c.name;
    ASSERT_EQ(int64_t(f.block_bytes), format.block_bytes) << c.name;
    ASSERT_EQ(int64_t(f.block_size), format.block_size) << c.name;
    const int64_t n = int64_t(f.blocks) * f.block_size;
    const std::vector<float> ours = dequantize(format, f.raw, n);
    const Decoded independent = decode(c.type, f.raw.data(), n);
    int infinities = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      ASSERT_EQ(float_to_bits(ours[i]), float_to_bits(f.gguf_py[i]))
          << c.name << " value " << i << ": ours " << ours[i] << ", gguf-py " << f.gguf_py[i];
      const float expected = float(independent.level[i]) * independent.scale[i];
      ASSERT_EQ(float_to_bits(ours[i]), float_to_bits(expected)) << c.name << " value " << i;
      infinities += std::isinf(ours[i]) ? 1 : 0;
    }
    if (c.type == DType::MXFP4) {
      EXPECT_GT(infinities, 0) << "the fixture has blocks with e = 255";
    }
  }
}

TEST(TqMxfp4Fixture, TypeIdsNamesAndSizesAreGgmls) {
  EXPECT_EQ(uint32_t(DType::TQ1_0), 34u);  // ggml.h: GGML_TYPE_TQ1_0
  EXPECT_EQ(uint32_t(DType::TQ2_0), 35u);  // GGML_TYPE_TQ2_0
  EXPECT_EQ(uint32_t(DType::MXFP4), 39u);  // GGML_TYPE_MXFP4
  EXPECT_EQ(dtype_from_name("tq2_0"), DType::TQ2_0);
  EXPECT_EQ(dtype_name(DType::MXFP4), "MXFP4");
  for (const FixtureCase& c : kCases) {
    const DTypeLayout layout = dtype_layout(c.type);
    const WeightFormat& format = quant::require_format(c.type);
    EXPECT_EQ(layout.block_size, format.block_size) << c.name;
    EXPECT_EQ(layout.block_bytes, format.block_bytes) << c.name;
    EXPECT_EQ(layout.row_header_bytes, 0);
  }
  EXPECT_EQ(quant::require_format(DType::TQ1_0).activation_type, DType::Q8_K);
  EXPECT_EQ(quant::require_format(DType::TQ2_0).activation_type, DType::Q8_K);
  EXPECT_EQ(quant::require_format(DType::MXFP4).activation_type, DType::Q8_0);
  EXPECT_EQ(dtype_row_bytes(DType::TQ1_0, 512), 2 * 54);
  EXPECT_EQ(dtype_row_bytes(DType::TQ2_0, 256), 66);
  EXPECT_EQ(dtype_row_bytes(DType::MXFP4, 64), 2 * 17);
}

TEST(TqMxfp4Fixture, GgufFileFromGgufPyLoads) {
  // tq_mxfp4.gguf holds the dequantization fixtures' blocks as 8-row matrices.
  const auto file = gguf::GgufFile::open(std::string(KESTREL_TEST_DATA) + "/quant/tq_mxfp4.gguf");
  EXPECT_EQ(file->get_uint("general.file_type"), 37u);  // LLAMA_FTYPE_MOSTLY_TQ2_0
  for (const FixtureCase& c : kCases) {
    const test::QuantFixture f = test::read_quant_fixture(std::string(c.name) + ".bin");
    const std::string name = std::string(c.name) + ".weight";
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

TEST(TqMxfp4Fixture, QuantizerWritesGgufPysBytes) {
  // Gaussian blocks of many magnitudes, exact rounding ties, zero blocks, clipped outliers and
  // (MXFP4) largest magnitudes at or one float below a power of two.
  for (const FixtureCase& c : kCases) {
    const WeightFormat& format = quant::require_format(c.type);
    const test::QuantFixture f =
        test::read_quant_fixture(std::string(c.name) + "_quant.bin", uint32_t(format.block_size));
    ASSERT_EQ(f.ggml_type, uint32_t(c.type));
    const int64_t n = int64_t(f.blocks) * f.block_size;
    const std::vector<uint8_t> ours = quantize(format, f.original);
    ASSERT_EQ(ours.size(), f.raw.size()) << c.name;
    for (size_t i = 0; i < ours.size(); ++i) {
      ASSERT_EQ(int(ours[i]), int(f.raw[i])) << c.name << " byte " << i << " (block " << i / f.block_bytes << ")";
    }
    const std::vector<float> values = dequantize(format, ours, n);
    EXPECT_EQ(std::memcmp(values.data(), f.gguf_py.data(), values.size() * 4), 0) << c.name;
  }
}

// ---------------------------------------------------------------------------------------------
// Quantizer

TEST(TqMxfp4Quantize, ExactlyRepresentableRowsRoundTripExactly) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> ternary(-1, 1), index(0, 15), exponent(-100, 100);
  for (int trial = 0; trial < 50; ++trial) {
    for (DType type : {DType::TQ1_0, DType::TQ2_0}) {
      // d an F16 value, each element d * {-1, 0, 1}, one of them +-d so that amax = d.
      const float d = fp16_to_float(float_to_fp16(std::ldexp(1.0f + float(rng() % 1024) / 1024.0f, trial % 20 - 10)));
      std::vector<float> x(512);
      for (float& v : x) v = float(ternary(rng)) * d;
      x[size_t(trial)] = trial % 2 == 0 ? d : -d;
      x[size_t(256 + trial)] = d;
      const WeightFormat& format = quant::require_format(type);
      const std::vector<float> y = dequantize(format, quantize(format, x), 512);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i]) << dtype_name(type) << " trial " << trial;
    }
    // MXFP4: a power-of-two scale times levels, the largest +-8 or +-12 (amax in [8, 16) * scale).
    const float scale = std::ldexp(1.0f, exponent(rng));
    std::vector<float> x(64);
    for (float& v : x) v = float(kMxfp4Levels[index(rng)]) * scale;
    x[size_t(trial % 32)] = float(trial % 2 == 0 ? 12 : -8) * scale;
    x[size_t(32 + trial % 32)] = float(trial % 3 == 0 ? -12 : 8) * scale;
    const WeightFormat& format = quant::require_format(DType::MXFP4);
    const std::vector<uint8_t> bytes = quantize(format, x);
    const std::vector<float> y = dequantize(format, bytes, 64);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i]) << "MXFP4 trial " << trial << " value " << i;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_FALSE(std::signbit(y[i]) && y[i] == 0.0f) << "zero is stored as index 0, not -0";
    }
  }
}

TEST(TqMxfp4Quantize, Mxfp4TiesAndTinyBlocks) {
  const WeightFormat& format = quant::require_format(DType::MXFP4);
  // amax 8 gives scale 1; halfway points take the level of smaller magnitude (the first index).
  std::vector<float> x(32, 0.0f);
  x[0] = 8.0f;
  x[1] = 1.5f;     // 1 or 2 -> 1
  x[2] = -0.5f;    // 0 or -1 -> 0
  x[3] = 10.0f;    // 8 or 12 -> 8
  x[4] = 100.0f / 8.0f;  // above the top level: 12
  std::vector<uint8_t> bytes = quantize(format, x);
  EXPECT_EQ(bytes[0], 128) << "e = floor(log2 8) - 2 + 127";
  std::vector<float> y = dequantize(format, bytes, 32);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_FALSE(std::signbit(y[2]));
  EXPECT_EQ(y[3], 8.0f);
  EXPECT_EQ(y[4], 12.0f);
  // amax below 2^-125, where llama.cpp's e would be negative: the smallest scale, e = 0.
  std::fill(x.begin(), x.end(), 0.0f);
  x[7] = std::ldexp(1.0f, -130);
  bytes = quantize(format, x);
  EXPECT_EQ(bytes[0], 0);
  y = dequantize(format, bytes, 32);
  EXPECT_EQ(y[7], 0.0f) << "2^-130 is below half of the smallest step 2^-128";
  x[7] = std::ldexp(1.0f, -126);
  y = dequantize(format, quantize(format, x), 32);
  EXPECT_EQ(y[7], std::ldexp(1.0f, -126)) << "level 4 at scale 2^-128";
}

TEST(TqMxfp4Quantize, ZeroRowsQuantizeToZero) {
  for (const FixtureCase& c : kCases) {
    const WeightFormat& format = quant::require_format(c.type);
    const std::vector<float> x(512, 0.0f);
    const std::vector<float> y = dequantize(format, quantize(format, x), 512);
    for (float v : y) ASSERT_EQ(float_to_bits(v), 0u) << c.name;
  }
}

// ---------------------------------------------------------------------------------------------
// Dot products

TEST(TqMxfp4Dot, DotOfRandomBlocksMatchesTheDequantizedDot) {
  // The fixtures' random blocks (every trit, code and level; MXFP4 blocks whose values overflow
  // are left out) against random activations.
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const FixtureCase& c : kCases) {
    const test::QuantFixture f = test::read_quant_fixture(std::string(c.name) + ".bin");
    const WeightFormat& format = quant::require_format(c.type);
    const WeightFormat& act = quant::require_format(format.activation_type);
    const int64_t n = 256;
    const int64_t row_bytes = quant::row_bytes(format, n);
    int checked = 0;
    for (int64_t r = 0; r < int64_t(f.raw.size()) / row_bytes; ++r) {
      const uint8_t* row = f.raw.data() + r * row_bytes;
      std::vector<float> x(static_cast<size_t>(n)), w_deq(static_cast<size_t>(n)), a_deq(static_cast<size_t>(n));
      for (float& v : x) v = dist(rng);
      format.dequantize_row(row, w_deq.data(), n);
      if (!std::all_of(w_deq.begin(), w_deq.end(), [](float v) { return std::isfinite(v) && std::fabs(v) < 1e30f; })) {
        continue;
      }
      std::vector<uint8_t> a(size_t(quant::row_bytes(act, n)));
      act.quantize_row(x.data(), a.data(), n);
      act.dequantize_row(a.data(), a_deq.data(), n);
      double exact = 0.0, size = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(w_deq[size_t(i)]) * a_deq[size_t(i)];
        size += std::fabs(double(w_deq[size_t(i)]) * a_deq[size_t(i)]);
      }
      const double got = format.vec_dot(row, a.data(), n);
      EXPECT_NEAR(got, exact, (double(n) / double(act.block_size) + 8) * 4 * kU * size + 1e-30)
          << c.name << " row " << r;
      ++checked;
    }
    EXPECT_GE(checked, 4) << c.name;
  }
}

TEST(TqMxfp4Dot, VecDotApproximatesTheOriginalDot) {
  // Ternary weights are exact on ternary data; MXFP4 is about 2 bits of mantissa.
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> ternary(-1, 1);
  for (const FixtureCase& c : kCases) {
    const WeightFormat& format = quant::require_format(c.type);
    const WeightFormat& act = quant::require_format(format.activation_type);
    const int64_t n = 2048;
    std::vector<float> w(static_cast<size_t>(n)), x(static_cast<size_t>(n));
    for (float& v : w) v = c.type == DType::MXFP4 ? dist(rng) : 0.25f * float(ternary(rng));
    for (float& v : x) v = dist(rng);
    std::vector<uint8_t> a(size_t(quant::row_bytes(act, n)));
    act.quantize_row(x.data(), a.data(), n);
    double exact = 0, norm_w = 0, norm_x = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact += double(w[size_t(i)]) * x[size_t(i)];
      norm_w += double(w[size_t(i)]) * w[size_t(i)];
      norm_x += double(x[size_t(i)]) * x[size_t(i)];
    }
    const double got = format.vec_dot(quantize(format, w).data(), a.data(), n);
    // Ternary: only the 8-bit activations err (< 1% of |w||x|); MXFP4: relative RMS error ~0.2.
    const double bound = (c.type == DType::MXFP4 ? 0.3 : 0.01) * std::sqrt(norm_w * norm_x);
    EXPECT_NEAR(got, exact, bound) << c.name;
  }
}

}  // namespace
}  // namespace kestrel
