// Kestrel's own weight formats (DType ids >= 1000): INT8 per channel, INT4 per group (symmetric and
// asymmetric, groups of 32/64/128), FP8 E4M3 per channel. Layout and row-header sizes, the E4M3
// codec against a brute-force nearest search, quantize -> dequantize error bounds derived from each
// layout, vec_dot against the dequantized dot, and GGUF files holding rows with headers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "quant/blocks.h"
#include "quant/format.h"
#include "quant/fp8.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using quant::WeightFormat;

constexpr double kU = 0x1p-24;

const DType kKestrelTypes[] = {DType::INT8_PC,       DType::INT4_SYM_G32,  DType::INT4_SYM_G64,
                               DType::INT4_SYM_G128, DType::INT4_ASYM_G32, DType::INT4_ASYM_G64,
                               DType::INT4_ASYM_G128, DType::INT3_ASYM_G64, DType::INT3_ASYM_G128,
                               DType::INT2_ASYM_G64, DType::INT2_ASYM_G128, DType::FP8_E4M3_PC};

int group_of(DType t) {
  switch (t) {
    case DType::INT4_SYM_G64: case DType::INT4_ASYM_G64: case DType::INT3_ASYM_G64: case DType::INT2_ASYM_G64:
      return 64;
    case DType::INT4_SYM_G128: case DType::INT4_ASYM_G128: case DType::INT3_ASYM_G128: case DType::INT2_ASYM_G128:
      return 128;
    case DType::FP8_E4M3_PC: return 1;
    default: return 32;
  }
}
bool is_asym(DType t) {
  return t == DType::INT4_ASYM_G32 || t == DType::INT4_ASYM_G64 || t == DType::INT4_ASYM_G128 ||
         t == DType::INT3_ASYM_G64 || t == DType::INT3_ASYM_G128 || t == DType::INT2_ASYM_G64 ||
         t == DType::INT2_ASYM_G128;
}
// The top level of an asymmetric format: 2^bits - 1.
int max_level(DType t) {
  if (t == DType::INT3_ASYM_G64 || t == DType::INT3_ASYM_G128) return 7;
  if (t == DType::INT2_ASYM_G64 || t == DType::INT2_ASYM_G128) return 3;
  return 15;
}
bool is_sym4(DType t) {
  return t == DType::INT4_SYM_G32 || t == DType::INT4_SYM_G64 || t == DType::INT4_SYM_G128;
}

TEST(KestrelFormats, IdsNamesAndRowLayouts) {
  for (DType t : kKestrelTypes) {
    EXPECT_GE(uint32_t(t), 1000u);
    EXPECT_TRUE(is_kestrel_dtype(t));
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
    const WeightFormat& f = quant::require_format(t);
    const DTypeLayout layout = dtype_layout(t);
    EXPECT_EQ(f.block_size, layout.block_size) << dtype_name(t);
    EXPECT_EQ(f.block_bytes, layout.block_bytes) << dtype_name(t);
    EXPECT_EQ(f.row_header_bytes, layout.row_header_bytes) << dtype_name(t);
  }
  EXPECT_FALSE(is_kestrel_dtype(DType::MXFP4));
  EXPECT_EQ(dtype_from_name("int4_asym_g64"), DType::INT4_ASYM_G64);
  // Row = header + blocks: INT8_PC 4 + k; INT4 sym 2 + G/2 per group; asym 4 + G/2; FP8 4 + k.
  EXPECT_EQ(dtype_row_bytes(DType::INT8_PC, 96), 4 + 96);
  EXPECT_EQ(dtype_row_bytes(DType::INT4_SYM_G32, 96), 3 * 18);
  EXPECT_EQ(dtype_row_bytes(DType::INT4_SYM_G128, 256), 2 * 66);
  EXPECT_EQ(dtype_row_bytes(DType::INT4_ASYM_G64, 192), 3 * 36);
  EXPECT_EQ(dtype_row_bytes(DType::FP8_E4M3_PC, 7), 4 + 7);
  EXPECT_EQ(dtype_row_bytes(DType::Q4_K, 512), 2 * 144) << "GGML types have no header";
  EXPECT_EQ(quant::require_format(DType::INT8_PC).activation_type, DType::Q8_0);
  EXPECT_EQ(quant::require_format(DType::INT4_SYM_G64).activation_type, DType::Q8_0);
  EXPECT_EQ(quant::require_format(DType::INT4_ASYM_G128).activation_type, DType::Q8_1);
  EXPECT_EQ(quant::require_format(DType::FP8_E4M3_PC).activation_type, DType::F32);
}

// ---------------------------------------------------------------------------------------------
// E4M3

TEST(Fp8E4M3, DecodeTableFollowsTheOcpDefinition) {
  EXPECT_EQ(quant::kE4M3ToFloat[0x7e], 448.0f);
  EXPECT_EQ(quant::kE4M3ToFloat[0xfe], -448.0f);
  EXPECT_EQ(quant::kE4M3ToFloat[0x01], 0x1p-9f) << "smallest subnormal";
  EXPECT_EQ(quant::kE4M3ToFloat[0x08], 0x1p-6f) << "smallest normal";
  EXPECT_EQ(quant::kE4M3ToFloat[0x38], 1.0f) << "exponent field 7 = bias";
  EXPECT_EQ(quant::kE4M3ToFloat[0x3c], 1.5f);
  EXPECT_TRUE(std::isnan(quant::kE4M3ToFloat[0x7f]));
  EXPECT_TRUE(std::isnan(quant::kE4M3ToFloat[0xff]));
  EXPECT_TRUE(std::signbit(quant::kE4M3ToFloat[0x80]));
  int nans = 0;
  for (int c = 0; c < 256; ++c) nans += std::isnan(quant::kE4M3ToFloat[c]);
  EXPECT_EQ(nans, 2) << "no infinities, only two NaN codes";
  // Positive codes increase strictly with their bit pattern.
  for (int c = 1; c < 0x7f; ++c) EXPECT_LT(quant::kE4M3ToFloat[c - 1], quant::kE4M3ToFloat[c]) << c;
}

// Independent encoder: nearest finite code by exhaustive search, ties to the even code.
uint8_t brute_force_e4m3(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  const double v = std::clamp(double(x), -448.0, 448.0);
  int best = -1;
  double best_dist = 0;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    const double d = std::fabs(double(quant::kE4M3ToFloat[c]) - v);
    if (best < 0 || d < best_dist || (d == best_dist && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_dist = d;
    }
  }
  // -0 and +0 are both at distance 0 from 0: keep the sign of the input.
  if ((best & 0x7f) == 0) best = std::signbit(x) ? 0x80 : 0x00;
  return uint8_t(best);
}

TEST(Fp8E4M3, EncodeIsNearestEvenAndSaturates) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(quant::float_to_e4m3(quant::kE4M3ToFloat[c]), c) << "code " << c;
  }
  // Midpoints between neighbours go to the even code; just off them to the nearer one.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = quant::kE4M3ToFloat[c], hi = quant::kE4M3ToFloat[c + 1];
    const float mid = float((double(lo) + hi) / 2);
    ASSERT_EQ(double(mid), (double(lo) + hi) / 2);
    EXPECT_EQ(quant::float_to_e4m3(mid), (c & 1) ? c + 1 : c) << "between " << c << " and " << c + 1;
    EXPECT_EQ(quant::float_to_e4m3(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(quant::float_to_e4m3(std::nextafter(mid, 1e9f)), c + 1);
    EXPECT_EQ(quant::float_to_e4m3(-mid), ((c & 1) ? c + 1 : c) | 0x80);
  }
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(quant::float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(quant::float_to_e4m3(464.0f), 0x7e) << "saturates, no rounding up to NaN";
  EXPECT_EQ(quant::float_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(quant::float_to_e4m3(inf), 0x7e);
  EXPECT_EQ(quant::float_to_e4m3(-inf), 0xfe);
  EXPECT_EQ(quant::float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(quant::float_to_e4m3(0x1p-11f), 0x00) << "below half the smallest subnormal";
  EXPECT_EQ(quant::float_to_e4m3(0x1p-10f), 0x00) << "tie between 0 and 2^-9: even (0)";
  EXPECT_EQ(quant::float_to_e4m3(0x1.8p-9f), 0x02) << "tie between codes 1 and 2: even (2)";

  std::mt19937 rng(8);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = (rng() & 1 ? -1.0f : 1.0f) * std::exp2(exponent(rng));
    ASSERT_EQ(quant::float_to_e4m3(x), brute_force_e4m3(x)) << x;
  }
}

// ---------------------------------------------------------------------------------------------
// Round trip

std::vector<float> random_row(std::mt19937& rng, int64_t n, int kind) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = normal(rng);
    switch (kind % 4) {
      case 0: x[i] = 0.02f * v; break;
      case 1: x[i] = 300.0f * v; break;
      case 2: x[i] = 0.7f * v + (i % 64 == 9 ? 40.0f : 0.0f); break;  // outliers
      default: x[i] = 0.05f * std::fabs(v) + 0.2f; break;              // all positive, offset
    }
  }
  return x;
}

// Per-element error bound derived from the layout, computed from the input row alone.
std::vector<double> error_bounds(DType t, const std::vector<float>& x) {
  const size_t n = x.size();
  std::vector<double> bound(n);
  if (t == DType::INT8_PC || t == DType::FP8_E4M3_PC) {
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    for (size_t i = 0; i < n; ++i) {
      if (t == DType::INT8_PC) {
        // scale = amax / 127 in F32; rounding to the nearest multiple: half a scale, plus a few
        // ulp from x * (127 / amax) and scale * q.
        bound[i] = amax / 127.0 * (0.5 + 1e-5);
      } else {
        // E4M3 keeps 3 mantissa bits: relative half-ulp 2^-4 in the normal range; below 2^-6
        // the step is 2^-9, half of it 2^-10 (times the row scale amax / 448); + float slack.
        bound[i] = std::fabs(x[i]) * (0x1p-4 + 4 * kU) + amax / 448.0 * 0x1p-10;
      }
    }
    return bound;
  }
  const size_t g = size_t(group_of(t));
  for (size_t b = 0; b < n / g; ++b) {
    float lo = x[b * g], hi = x[b * g], extreme = 0;
    for (size_t i = b * g; i < b * g + g; ++i) {
      lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
      if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
    }
    for (size_t i = b * g; i < b * g + g; ++i) {
      if (is_sym4(t)) {
        // d = extreme / -8 stored as F16 (d'); values are put on d' * [-8, 7]. Inside the range
        // the error is half a step; values beyond 7.5 |d'| on the side opposite the extreme clamp
        // to level 7: error |x| - 7 |d'|.
        const double d = fp16_to_float(float_to_fp16(extreme / -8.0f));
        const double ad = std::fabs(d);
        bound[i] = std::max(ad * 0.5, std::fabs(x[i]) - 7 * ad) + ad * 1e-5 + 4 * kU * std::fabs(x[i]);
      } else {
        // d = (max - min) / L and m = min (L = 15, 7, 3: the top level), each stored as F16; the
        // stored grid m' + d' [0, L] misses [min, max] by at most |m - m'| + L |d - d'|.
        const int levels = max_level(t);
        const double d = (double(hi) - lo) / levels;
        const double d16 = fp16_to_float(float_to_fp16(float(d)));
        const double m16 = fp16_to_float(float_to_fp16(lo));
        bound[i] = d16 * (0.5 + 1e-5) + std::fabs(lo - m16) + levels * std::fabs(d - d16) +
                   4 * kU * (std::fabs(x[i]) + std::fabs(m16));
      }
    }
  }
  return bound;
}

std::vector<int64_t> lengths_for(DType t) {
  if (t == DType::FP8_E4M3_PC) return {1, 7, 173, 256};
  const int64_t g = group_of(t);
  return {g, 3 * g, 7 * g};
}

std::vector<uint8_t> quantize(const WeightFormat& f, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(size_t(quant::row_bytes(f, int64_t(x.size()))));
  f.quantize_row(x.data(), bytes.data(), int64_t(x.size()));
  return bytes;
}

std::vector<float> dequantize(const WeightFormat& f, const uint8_t* bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  f.dequantize_row(bytes, out.data(), n);
  return out;
}

TEST(KestrelFormats, RoundTripErrorWithinLayoutBound) {
  std::mt19937 rng(21);
  for (DType t : kKestrelTypes) {
    const WeightFormat& f = quant::require_format(t);
    for (int64_t n : lengths_for(t)) {
      // Five rows quantized back to back into one buffer: rows after the first start at offsets
      // that are not multiples of 4 for FP8 of odd length (the F32 header is read with memcpy).
      const int rows = 5;
      const int64_t rb = quant::row_bytes(f, n);
      std::vector<uint8_t> buffer(size_t(rows * rb));
      std::vector<std::vector<float>> xs;
      for (int r = 0; r < rows; ++r) {
        xs.push_back(random_row(rng, n, r));
        f.quantize_row(xs.back().data(), buffer.data() + r * rb, n);
      }
      for (int r = 0; r < rows; ++r) {
        const std::vector<float> y = dequantize(f, buffer.data() + r * rb, n);
        const std::vector<double> bound = error_bounds(t, xs[size_t(r)]);
        for (int64_t i = 0; i < n; ++i) {
          const size_t k = size_t(i);
          ASSERT_LE(std::fabs(double(y[k]) - xs[size_t(r)][k]), bound[k])
              << dtype_name(t) << " n=" << n << " row " << r << " i=" << i << " x=" << xs[size_t(r)][k];
        }
      }
    }
  }
}

TEST(KestrelFormats, ZeroRowsAndHandComputedValues) {
  for (DType t : kKestrelTypes) {
    const WeightFormat& f = quant::require_format(t);
    const std::vector<float> zero(128, 0.0f);
    const std::vector<uint8_t> q = quantize(f, zero);
    for (float v : dequantize(f, q.data(), 128)) EXPECT_EQ(v, 0.0f) << dtype_name(t);
  }
  // INT8_PC: amax 127 -> scale 1, values stored exactly; the header is the F32 scale.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i * 8 - 127);
  const WeightFormat& int8 = quant::require_format(DType::INT8_PC);
  const std::vector<uint8_t> q8 = quantize(int8, x);
  float scale;
  std::memcpy(&scale, q8.data(), 4);
  EXPECT_EQ(scale, 1.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(int8_t(q8[size_t(4 + i)]), i * 8 - 127);
  EXPECT_EQ(dequantize(int8, q8.data(), 32), x);
  // INT4_SYM_G32: -8..7 with extreme -8 -> d = 1; byte l = level l | level l + 16 << 4.
  for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i % 16 - 8);
  const WeightFormat& sym = quant::require_format(DType::INT4_SYM_G32);
  const std::vector<uint8_t> q4 = quantize(sym, x);
  EXPECT_EQ(q4[0] | q4[1] << 8, 0x3c00) << "d = 1.0 in F16";
  for (int l = 0; l < 16; ++l) EXPECT_EQ(q4[size_t(2 + l)], l | l << 4) << l;
  EXPECT_EQ(dequantize(sym, q4.data(), 32), x);
  // INT4_ASYM_G64: 0.25 * (q + 4) for q = i % 16: d = 0.25, m = 1, exact.
  std::vector<float> y(64);
  for (int i = 0; i < 64; ++i) y[size_t(i)] = 0.25f * float(i % 16 + 4);
  const WeightFormat& asym = quant::require_format(DType::INT4_ASYM_G64);
  const std::vector<uint8_t> qa = quantize(asym, y);
  EXPECT_EQ(qa[0] | qa[1] << 8, 0x3400) << "d = 0.25";
  EXPECT_EQ(qa[2] | qa[3] << 8, 0x3c00) << "m = 1.0";
  EXPECT_EQ(qa[4], 0 | 0 << 4) << "element 0 (q 0) and element 32 (q 0)";
  EXPECT_EQ(qa[5], 1 | 1 << 4);
  EXPECT_EQ(dequantize(asym, qa.data(), 64), y);
  // INT3_ASYM_G64: 0.5 * q - 2 for q = (i * 5) % 8: d = 0.5, m = -2, exact. Bit planes: the low 2
  // bits of element i at bits 2 (i / 16) of byte 4 + i % 16, its high bit at bit i / 8 of byte
  // 20 + i % 8.
  std::vector<float> v3(64);
  for (int i = 0; i < 64; ++i) v3[size_t(i)] = 0.5f * float((i * 5) % 8) - 2.0f;
  const WeightFormat& int3 = quant::require_format(DType::INT3_ASYM_G64);
  const std::vector<uint8_t> q3 = quantize(int3, v3);
  ASSERT_EQ(q3.size(), 28u);
  EXPECT_EQ(q3[0] | q3[1] << 8, 0x3800) << "d = 0.5";
  EXPECT_EQ(q3[2] | q3[3] << 8, 0xc000) << "m = -2.0";
  for (int byte = 0; byte < 16; ++byte) {
    int expected = 0;
    for (int k = 0; k < 4; ++k) expected |= (((16 * k + byte) * 5) % 8 & 3) << (2 * k);
    EXPECT_EQ(q3[size_t(4 + byte)], expected) << "crumb byte " << byte;
  }
  for (int byte = 0; byte < 8; ++byte) {
    int expected = 0;
    for (int k = 0; k < 8; ++k) expected |= (((8 * k + byte) * 5) % 8 >> 2) << k;
    EXPECT_EQ(q3[size_t(20 + byte)], expected) << "high-bit byte " << byte;
  }
  EXPECT_EQ(dequantize(int3, q3.data(), 64), v3);
  // INT2_ASYM_G128: q = i % 4 + m with d = 1, m = 3: byte 4 + l holds elements l, l + 32, l + 64,
  // l + 96, all with level l % 4.
  std::vector<float> v2(128);
  for (int i = 0; i < 128; ++i) v2[size_t(i)] = float(i % 4 + 3);
  const WeightFormat& int2 = quant::require_format(DType::INT2_ASYM_G128);
  const std::vector<uint8_t> q2 = quantize(int2, v2);
  ASSERT_EQ(q2.size(), 36u);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(q2[size_t(4 + l)], (l % 4) * 0x55) << l;
  EXPECT_EQ(dequantize(int2, q2.data(), 128), v2);
  // FP8: amax 448 -> scale 1; codes are the values' own E4M3 codes.
  const std::vector<float> z = {448.0f, -1.5f, 0.0f, 0x1p-9f, 3.0f};
  const WeightFormat& fp8 = quant::require_format(DType::FP8_E4M3_PC);
  const std::vector<uint8_t> qf = quantize(fp8, z);
  EXPECT_EQ(std::vector<uint8_t>(qf.begin() + 4, qf.end()),
            (std::vector<uint8_t>{0x7e, 0xbc, 0x00, 0x01, 0x44}));
  EXPECT_EQ(dequantize(fp8, qf.data(), 5), z);
}

// ---------------------------------------------------------------------------------------------
// vec_dot

TEST(KestrelFormats, VecDotMatchesDequantizedDotAndApproximatesOriginal) {
  std::mt19937 rng(4);
  for (DType t : kKestrelTypes) {
    const WeightFormat& f = quant::require_format(t);
    const WeightFormat& act = quant::require_format(f.activation_type);
    for (int64_t n : lengths_for(t)) {
      if (n % act.block_size != 0) continue;
      for (int trial = 0; trial < 8; ++trial) {
        const std::vector<float> w = random_row(rng, n, trial);
        const std::vector<float> a = random_row(rng, n, trial + 1);
        const std::vector<uint8_t> qw = quantize(f, w), qa = quantize(act, a);
        const std::vector<float> dw = dequantize(f, qw.data(), n), da = dequantize(act, qa.data(), n);
        const float got = f.vec_dot(qw.data(), qa.data(), n);
        double exact = 0, magnitude = 0, original = 0, quant_tol = 0;
        const std::vector<double> ew = error_bounds(t, w);
        for (int64_t i = 0; i < n; ++i) {
          const size_t k = size_t(i);
          exact += double(dw[k]) * da[k];
          original += double(w[k]) * a[k];
          // Asymmetric weights are summed as d q a + m a, with |d q| <= |w'| + |m|.
          double m = 0;
          if (is_asym(t)) {
            uint16_t m_bits;
            std::memcpy(&m_bits, qw.data() + (i / group_of(t)) * f.block_bytes + 2, 2);
            m = std::fabs(fp16_to_float(m_bits));
          }
          magnitude += (std::fabs(dw[k]) + 2 * m) * std::fabs(da[k]);
        }
        // Q8_1's s = d * sum(q) is stored as F16 (relative error 2^-11): the m * s terms carry it.
        double s_error = 0;
        if (is_asym(t)) {
          const int g = group_of(t);
          for (int64_t b = 0; b < n / 32; ++b) {
            quant::BlockQ8_1 block;
            std::memcpy(&block, qa.data() + b * sizeof block, sizeof block);
            int sum = 0;
            for (int i = 0; i < 32; ++i) sum += block.qs[i];
            uint16_t m_bits;
            std::memcpy(&m_bits, qw.data() + (b * 32 / g) * f.block_bytes + 2, 2);
            s_error += std::fabs(fp16_to_float(m_bits)) *
                       std::fabs(double(fp16_to_float(block.s)) - double(fp16_to_float(block.d)) * sum);
          }
        }
        // Per element at most ~6 roundings before a float sum of at most n terms:
        // (n + 8) u sum |w' a'| (generous for the block formats, which sum exact integers).
        const double kernel_tol = (double(n) + 8) * kU * magnitude + s_error + 1e-30;
        EXPECT_NEAR(got, exact, kernel_tol) << dtype_name(t) << " n=" << n << " trial " << trial;

        // Against the originals: sum |w| e_a + |a'| e_w with e_a the activation's own layout
        // bound (Q8_0/Q8_1: half of amax/127 per block, F16 scale; F32: exact).
        for (int64_t b = 0; b < n / act.block_size; ++b) {
          float amax = 0;
          for (int64_t i = b * act.block_size; i < (b + 1) * act.block_size; ++i) {
            amax = std::max(amax, std::fabs(a[size_t(i)]));
          }
          const double d = fp16_to_float(float_to_fp16(amax / 127.0f));
          for (int64_t i = b * act.block_size; i < (b + 1) * act.block_size; ++i) {
            const size_t k = size_t(i);
            const double ea = f.activation_type == DType::F32 ? 0.0 : d * 0.5 + 127 * std::fabs(d - amax / 127.0) + 1e-6 * d;
            quant_tol += std::fabs(w[k]) * ea + std::fabs(da[k]) * ew[k];
          }
        }
        EXPECT_NEAR(got, original, quant_tol + kernel_tol) << dtype_name(t) << " n=" << n;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// GGUF files with row headers

TEST(KestrelFormats, GgufRowsWithHeadersRoundTrip) {
  const std::string path = test::scratch_dir("kestrel_formats") + "/rows.gguf";
  std::mt19937 rng(9);
  gguf::GgufWriter writer;
  struct Case { DType type; int64_t cols, rows; std::vector<uint8_t> bytes; };
  std::vector<Case> cases = {{DType::FP8_E4M3_PC, 7, 3, {}}, {DType::INT8_PC, 64, 5, {}},
                             {DType::INT4_ASYM_G128, 256, 3, {}}};
  for (Case& c : cases) {
    const WeightFormat& f = quant::require_format(c.type);
    const int64_t rb = quant::row_bytes(f, c.cols);
    c.bytes.resize(size_t(rb * c.rows));
    for (int64_t r = 0; r < c.rows; ++r) {
      const std::vector<float> x = random_row(rng, c.cols, int(r));
      f.quantize_row(x.data(), c.bytes.data() + r * rb, c.cols);
    }
    writer.add_tensor(std::string(dtype_name(c.type)), c.type, {c.cols, c.rows}, c.bytes);
  }
  // Sizes that leave out the headers are rejected.
  EXPECT_THROW(writer.add_tensor("short", DType::FP8_E4M3_PC, {7, 3}, std::vector<uint8_t>(21)), Error);
  writer.write(path);
  const auto file = gguf::GgufFile::open(path);
  for (const Case& c : cases) {
    const gguf::TensorInfo* t = file->find_tensor(dtype_name(c.type));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, c.type);
    EXPECT_EQ(t->num_bytes, c.bytes.size()) << "rows * (header + blocks)";
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->num_bytes), c.bytes);
  }
}

}  // namespace
}  // namespace kestrel
