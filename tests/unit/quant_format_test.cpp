// The scalar weight formats (quant/format.h) and the F16/BF16 conversions they rest on (core/half.h):
// conversions against the F16C hardware and an independent BF16 reference, quantize->dequantize
// error bounds derived from each block layout, vec_dot against its scalar definition, and
// hand-computed blocks whose bytes are known.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/format.h"

namespace kestrel {
namespace {

using quant::WeightFormat;

constexpr double kU = 1.0 / 16777216.0;  // 2^-24, unit roundoff of float

// The hardware conversions (F16C is part of the x86-64-v3 baseline the build targets).
__attribute__((target("f16c"))) uint16_t hw_float_to_fp16(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_fp16_to_float(uint16_t h) { return _cvtsh_ss(h); }

bool is_f16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// ---------------------------------------------------------------------------------------------
// (a) F16 / BF16 conversions

TEST(Half, EveryF16DecodesLikeHardware) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float sw = fp16_to_float(uint16_t(h));
    const float hw = hw_fp16_to_float(uint16_t(h));
    if (is_f16_nan(uint16_t(h))) {
      // NaN payloads may differ in the quiet bit (hardware quiets signalling NaNs); only NaN-ness
      // and the sign are part of the contract.
      EXPECT_TRUE(std::isnan(sw)) << std::hex << h;
      EXPECT_EQ(std::signbit(sw), std::signbit(hw)) << std::hex << h;
      continue;
    }
    ASSERT_EQ(float_to_bits(sw), float_to_bits(hw)) << "half 0x" << std::hex << h;
    // Every half is exactly representable as a float, so the round trip is exact.
    ASSERT_EQ(float_to_fp16(sw), uint16_t(h)) << "half 0x" << std::hex << h;
  }
}

TEST(Half, HalfwayCasesRoundToEvenLikeHardware) {
  // The float exactly between two adjacent finite halves (exact: floats have 13 more bits).
  for (uint32_t h = 0; h < 0x7bffu; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const uint16_t lo = uint16_t(h | sign);
      const uint16_t hi = uint16_t((h + 1) | sign);
      const float mid = float((double(fp16_to_float(lo)) + double(fp16_to_float(hi))) / 2.0);
      ASSERT_EQ(double(mid), (double(fp16_to_float(lo)) + double(fp16_to_float(hi))) / 2.0);
      const uint16_t expected = (h & 1u) ? hi : lo;  // the even mantissa wins
      ASSERT_EQ(float_to_fp16(mid), expected) << "between 0x" << std::hex << lo;
      ASSERT_EQ(hw_float_to_fp16(mid), expected);
      // One float ulp either side of the tie must round to the nearer neighbour.
      ASSERT_EQ(float_to_fp16(std::nextafter(mid, 0.0f)), lo);
      ASSERT_EQ(float_to_fp16(std::nextafter(mid, sign ? -1e9f : 1e9f)), hi);
    }
  }
}

TEST(Half, EdgeValuesAndRandomFloatsMatchHardware) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {
      0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, -65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e10f,
      std::numeric_limits<float>::max(), inf, -inf, std::ldexp(1.0f, -14),  // smallest normal
      std::ldexp(1.0f, -24),                                                // smallest subnormal
      std::ldexp(1.0f, -25),                                 // tie between 0 and 2^-24: to 0
      std::ldexp(1.5f, -25), std::ldexp(3.0f, -25),          // 0.75 -> 1, tie 1.5 -> 2 (even)
      std::ldexp(1.0f, -26), std::ldexp(1023.5f, -24),       // rounds up into the normal range
      std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()};
  for (float f : edges) {
    EXPECT_EQ(float_to_fp16(f), hw_float_to_fp16(f)) << f;
  }
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00u) << "65520 is halfway to 2^16: overflows to inf";
  EXPECT_EQ(float_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
  EXPECT_EQ(float_to_fp16(-inf), 0xfc00u);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000u);
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002u);
  EXPECT_EQ(float_to_fp16(std::ldexp(1023.5f, -24)), 0x0400u);
  EXPECT_TRUE(is_f16_nan(float_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_f16_nan(float_to_fp16(bits_to_float(0x7f800001u))))
      << "a NaN whose payload is only in the low 13 bits must not become inf";

  // Random bit patterns cover every exponent; random small floats stress the subnormal path.
  std::mt19937 rng(1234);
  for (int i = 0; i < 1 << 21; ++i) {
    float f = bits_to_float(uint32_t(rng()));
    if (i % 2 == 1) f = std::ldexp(float(rng() % 100000) / 100000.0f, -14 - int(rng() % 12));
    const uint16_t sw = float_to_fp16(f);
    const uint16_t hw = hw_float_to_fp16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_f16_nan(sw)) << std::hex << float_to_bits(f);
      ASSERT_EQ(sw & 0x8000u, hw & 0x8000u);
    } else {
      ASSERT_EQ(sw, hw) << "float bits 0x" << std::hex << float_to_bits(f);
    }
  }
}

// Independent BF16 reference: pick the nearer of the two truncation neighbours in double.
uint16_t reference_bf16(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint16_t lo = uint16_t(bits >> 16);
  if ((bits & 0xffffu) == 0) return lo;
  const uint16_t hi = uint16_t(lo + 1);  // next magnitude up (may become inf)
  // Past the largest finite BF16 the next "value" is 2^128, as IEEE overflow rounding assumes.
  const double hi_value = (hi & 0x7f80u) == 0x7f80u ? std::copysign(0x1p128, double(f))
                                                    : double(bf16_to_float(hi));
  const double dl = std::fabs(double(f) - double(bf16_to_float(lo)));
  const double dh = std::fabs(hi_value - double(f));
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1u) ? hi : lo;
}

TEST(BFloat16, RoundsToNearestEvenAndHandlesSpecials) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = bf16_to_float(uint16_t(h));
    ASSERT_EQ(float_to_bits(f), h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bf16(f), uint16_t(h));
    }
  }
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808000u)), 0x3f80u) << "tie, even stays";
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f818000u)), 0x3f82u) << "tie, odd rounds up";
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80u) << "overflows to inf";
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80u);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00008000u)), 0x0000u) << "subnormal tie to even";
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00018000u)), 0x0002u);
  for (uint32_t nan_bits : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t b = float_to_bf16(bits_to_float(nan_bits));
    EXPECT_TRUE(std::isnan(bf16_to_float(b))) << std::hex << nan_bits;
    EXPECT_EQ(b & 0x8000u, (nan_bits >> 16) & 0x8000u);
  }
  std::mt19937 rng(99);
  for (int i = 0; i < 1 << 20; ++i) {
    const float f = bits_to_float(uint32_t(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), reference_bf16(f)) << std::hex << float_to_bits(f);
  }
}

// ---------------------------------------------------------------------------------------------
// (b) quantize -> dequantize error bounds

std::vector<float> random_row(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

struct Quantized {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized
};

Quantized round_trip(const WeightFormat& format, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  Quantized q;
  q.bytes.resize(size_t(quant::row_bytes(format, n)));
  q.values.resize(size_t(n));
  format.quantize_row(x.data(), q.bytes.data(), n);
  format.dequantize_row(q.bytes.data(), q.values.data(), n);
  return q;
}

// Largest error each element may have, derived from the format's layout. `x` is the whole row.
std::vector<double> error_bounds(DType type, const std::vector<float>& x) {
  std::vector<double> bound(x.size(), 0.0);
  const size_t n = x.size();
  switch (type) {
    case DType::F32:
      break;  // a copy: exact
    case DType::F16:
      // Round to nearest: half an ulp, 2^-11 relative in the normal range, 2^-25 absolute in the
      // subnormal range (ulp 2^-24). Test data stay below 65504, so no overflow.
      for (size_t i = 0; i < n; ++i) bound[i] = std::fabs(double(x[i])) * 0x1p-11 + 0x1p-25;
      break;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) bound[i] = std::fabs(double(x[i])) * 0x1p-8;
      break;
    case DType::Q8_0:
    case DType::Q4_0: {
      const bool q8 = type == DType::Q8_0;
      for (size_t b = 0; b < n / 32; ++b) {
        float amax = 0.0f, extreme = 0.0f;
        for (size_t i = b * 32; i < b * 32 + 32; ++i) {
          if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), extreme = x[i];
        }
        // d as computed, and as stored (rounded to F16, relative error <= 2^-11).
        const double d = q8 ? double(amax / 127.0f) : double(extreme / -8.0f);
        const double d_stored = fp16_to_float(float_to_fp16(float(d)));
        const double qmax = q8 ? 127.0 : 8.0;
        for (size_t i = b * 32; i < b * 32 + 32; ++i) {
          // Rounding to the nearest level costs |d|/2. Q4_0 maps the extreme to -8, so values
          // on the other side beyond 7.5|d| are clamped to level 7: error up to (v - 7)|d| <= |d|.
          const double v = d != 0.0 ? double(x[i]) / d : 0.0;
          const double levels = q8 ? 0.5 : std::max(0.5, v - 7.0);
          // + the F16 rounding of the scale times the largest level, + 1e-4|d| for the float
          // arithmetic (x * (1/d) is off by a few ulp of 127 at most).
          bound[i] = std::fabs(d) * (levels + 1e-4) + qmax * std::fabs(d - d_stored);
        }
      }
      break;
    }
    default:
      ADD_FAILURE() << "no bound for this type";
  }
  return bound;
}

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};

std::vector<int64_t> lengths_for(const WeightFormat& format) {
  if (format.block_size == 32) return {32, 32 * 7, 32 * 33};
  return {1, 7, 32, 173};
}

TEST(QuantFormat, TableDescribesGgufLayouts) {
  for (DType type : kTypes) {
    const WeightFormat& f = quant::require_format(type);
    EXPECT_EQ(f.type, type);
    EXPECT_EQ(f.block_size, dtype_layout(type).block_size) << dtype_name(type);
    EXPECT_EQ(f.block_bytes, dtype_layout(type).block_bytes) << dtype_name(type);
  }
  EXPECT_EQ(quant::require_format(DType::Q4_0).activation_type, DType::Q8_0);
  EXPECT_EQ(quant::find_format(DType::F64), nullptr);  // a GGML type Kestrel has no kernels for
  EXPECT_THROW(quant::require_format(DType::F64), Error);
}

TEST(QuantFormat, RoundTripErrorWithinLayoutBound) {
  std::mt19937 rng(42);
  for (DType type : kTypes) {
    const WeightFormat& format = quant::require_format(type);
    for (int64_t n : lengths_for(format)) {
      for (int row = 0; row < 5; ++row) {  // odd row count, different scales per row
        const float scale = row == 0 ? 1.0f : row == 1 ? 1e-3f : row == 2 ? 300.0f : 0.7f;
        std::vector<float> x = random_row(rng, n, scale);
        if (row == 3 && n >= 32) {
          x[5] = 40.0f;                                         // one outlier per block start
          std::fill(x.begin(), x.begin() + std::min<int64_t>(n, 32) / 2, 0.0f);
        }
        if (row == 4 && n >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // zero block
        const Quantized q = round_trip(format, x);
        const std::vector<double> bound = error_bounds(type, x);
        for (int64_t i = 0; i < n; ++i) {
          const double err = std::fabs(double(q.values[size_t(i)]) - double(x[size_t(i)]));
          ASSERT_LE(err, bound[size_t(i)])
              << dtype_name(type) << " n=" << n << " row=" << row << " i=" << i << " x=" << x[size_t(i)];
        }
      }
    }
  }
}

TEST(QuantFormat, Q4_0ClampOnTheOppositeSideCostsAtMostOneStep) {
  // Extreme -8 -> d = 1; +8 on the other side cannot be represented (levels stop at 7).
  const WeightFormat& format = quant::require_format(DType::Q4_0);
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;
  x[1] = 8.0f;
  x[2] = 7.4f;
  const Quantized q = round_trip(format, x);
  EXPECT_EQ(q.values[0], -8.0f);
  EXPECT_EQ(q.values[1], 7.0f);
  EXPECT_EQ(q.values[2], 7.0f);
}

// ---------------------------------------------------------------------------------------------
// (c) vec_dot against the scalar definition

TEST(QuantFormat, VecDotMatchesDequantizedDotAndApproximatesOriginal) {
  std::mt19937 rng(7);
  for (DType type : kTypes) {
    const WeightFormat& format = quant::require_format(type);
    const WeightFormat& act = quant::require_format(format.activation_type);
    for (int64_t n : lengths_for(format)) {
      for (int trial = 0; trial < 9; ++trial) {
        const std::vector<float> w = random_row(rng, n, trial % 3 == 0 ? 0.05f : 1.0f);
        const std::vector<float> a = random_row(rng, n, trial % 2 == 0 ? 3.0f : 1.0f);
        const Quantized qw = round_trip(format, w);
        const Quantized qa = round_trip(act, a);
        const float got = format.vec_dot(qw.bytes.data(), qa.bytes.data(), n);
        double exact = 0.0, sum_abs = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const double p = double(qw.values[size_t(i)]) * double(qa.values[size_t(i)]);
          exact += p;
          sum_abs += std::fabs(p);
        }
        // Float accumulation of at most n terms, each formed with <= 2 roundings: the classical
        // bound (n + 2) u sum|w_i a_i|.
        const double kernel_tol = double(n + 2) * kU * sum_abs + 1e-30;
        EXPECT_NEAR(double(got), exact, kernel_tol) << dtype_name(type) << " n=" << n;

        // Against the originals: |sum wa - sum w'a'| <= sum |w| e_a + |a'| e_w, with the
        // per-element bounds of the round-trip test.
        const std::vector<double> ew = error_bounds(type, w);
        const std::vector<double> ea = error_bounds(format.activation_type, a);
        double original = 0.0, quant_tol = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const size_t k = size_t(i);
          original += double(w[k]) * double(a[k]);
          quant_tol += std::fabs(double(w[k])) * ea[k] + std::fabs(double(qa.values[k])) * ew[k];
        }
        EXPECT_NEAR(double(got), original, quant_tol + kernel_tol) << dtype_name(type) << " n=" << n;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// (d) hand-computed blocks

TEST(QuantFormat, Q8_0BlockWithAmax127StoresTheValues) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i * 8 - 127);  // -127 .. 121, amax 127
  const Quantized q = round_trip(quant::require_format(DType::Q8_0), x);
  quant::BlockQ8_0 block;
  std::memcpy(&block, q.bytes.data(), sizeof block);
  EXPECT_EQ(block.d, 0x3c00u) << "d = 127 / 127 = 1.0";
  for (int i = 0; i < 32; ++i) EXPECT_EQ(int(block.qs[i]), i * 8 - 127) << i;
  EXPECT_EQ(q.values, x);
}

TEST(QuantFormat, Q4_0NibbleLayoutAndScaleSign) {
  const WeightFormat& format = quant::require_format(DType::Q4_0);
  for (float sign : {1.0f, -1.0f}) {
    // Values -8..7 (times sign), element j and j + 16 equal: byte j == q | q << 4 with q = j.
    std::vector<float> x(32);
    for (int i = 0; i < 32; ++i) x[size_t(i)] = sign * float(i % 16 - 8);
    const Quantized q = round_trip(format, x);
    quant::BlockQ4_0 block;
    std::memcpy(&block, q.bytes.data(), sizeof block);
    // Extreme is sign * -8, so d = -extreme / 8 = sign: 1.0 is 0x3c00, -1.0 is 0xbc00.
    EXPECT_EQ(block.d, sign > 0 ? 0x3c00u : 0xbc00u);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(int(block.qs[j]), j * 17) << j;
    EXPECT_EQ(q.values, x);
  }
}

TEST(QuantFormat, Q4_0RampBlock) {
  // x[i] = -0.25 i: extreme -7.75, d = 7.75 / 8 = 0.96875 (exact in F16: 0x3bc0).
  // q_i = floor(x/d + 8.5) = floor(8.5 - 8i/31) = floor((527 - 16 i) / 62), never on a tie.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = -0.25f * float(i);
  const Quantized q = round_trip(quant::require_format(DType::Q4_0), x);
  quant::BlockQ4_0 block;
  std::memcpy(&block, q.bytes.data(), sizeof block);
  EXPECT_EQ(block.d, 0x3bc0u);
  auto level = [](int i) { return (527 - 16 * i) / 62; };
  EXPECT_EQ(level(0), 8);
  EXPECT_EQ(level(2), 7);
  EXPECT_EQ(level(31), 0);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(int(block.qs[j]), level(j) | level(j + 16) << 4) << j;
  }
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(q.values[size_t(i)], 0.96875f * float(level(i) - 8)) << i;
  }
}

TEST(QuantFormat, ZeroBlockQuantizesToZeroScale) {
  const std::vector<float> x(64, 0.0f);
  for (DType type : {DType::Q8_0, DType::Q4_0}) {
    const Quantized q = round_trip(quant::require_format(type), x);
    for (float v : q.values) EXPECT_EQ(v, 0.0f) << dtype_name(type);
  }
}

}  // namespace
}  // namespace kestrel
