// The CPU kernel tables (backend/cpu/kernels.h) against quant/'s scalar references, for every ISA
// this machine runs (each forced through kernels_for, and through CpuBackend with KESTREL_ISA) and
// every weight format quant/ has:
//  - each (row, token) result within a derived tolerance of the reference vec_dot on the
//    reference-converted activations, over odd shapes (rows 1, 3, 17, 67; k of 1, 3, 5, ...
//    blocks) and batches of 1..17 tokens;
//  - bitwise the same for every batch size, token position, row range and thread count;
//  - exactly the reference on identity weights, which checks each converter's activation values
//    (rounding ties included) and the kernel's element order bit for bit.
//
// Tolerance. Kernel and reference multiply the same values exactly (integer block sums, or F32
// products of F16/BF16 values) and differ only in how the partial sums are grouped and rounded.
// Recursive summation of m terms is within gamma_m = m u / (1 - m u) of the exact sum, relative
// to the sum of the terms' magnitudes S, so |kernel - reference| <= (m_ref + m_kernel) u S. The
// reference's chain is one rounding per activation block (k / block) plus a few per block for
// the scales; a kernel's chain (k / vector step + 4 for the lane sum + 2 for scales) is shorter.
// We allow (2 k / activation_block + 16) u S. S is sum |w_i a_i| over the dequantized values, or
// for formats with a min term (Q4_K, Q5_K, INT4_ASYM, INT4_ZP) sum (|d q_i| + |m|) |a_i|, because the two
// terms are rounded separately before they cancel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/half.h"
#include "iq_grid_blocks.h"
#include "isa_env.h"
#include "quant/blocks.h"
#include "quant/format.h"
#include "quant_random_codes.h"

namespace kestrel {
namespace {

using cpu::FormatKernels;
using cpu::Isa;
using cpu::KernelTable;
using quant::WeightFormat;

constexpr double kU = 1.0 / 16777216.0;  // 2^-24, unit roundoff of float

// 64-byte aligned bytes, as CpuBackend hands them to the kernels.
class AlignedBytes {
 public:
  explicit AlignedBytes(size_t size) : storage_(size + 64) {
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    offset_ = (64 - address % 64) % 64;
  }
  uint8_t* data() { return storage_.data() + offset_; }

 private:
  std::vector<uint8_t> storage_;
  size_t offset_ = 0;
};

using test::IsaEnv;
using test::supported_isas;

const WeightFormat& activation_format(const WeightFormat& format) {
  return quant::require_format(format.activation_type);
}

// Row lengths to test: 1, 3, 5, ... blocks of the larger of the weight and activation blocks,
// plus a few lengths that leave a partial vector step, and for 256-element blocks one of 11
// super-blocks: more than the 8 that the AVX2 Q4_K/Q5_K prefill tiles decode at a time, so their
// accumulators are carried from one chunk to the next.
std::vector<int64_t> lengths_for(const WeightFormat& format) {
  const int64_t block = std::max(format.block_size, activation_format(format).block_size);
  if (block == 1) return {1, 7, 16, 33, 100, 173, 515};
  if (block == 32) return {32, 64, 96, 160, 288, 544};
  if (block == 64) return {64, 192, 320};
  if (block == 128) return {128, 384, 640};
  return {256, 768, 1280, 2816};
}

// Formats with a min term: offsets (in each block) of the F16 scale and min fields.
struct MinFields {
  bool present = false;
  int64_t scale_offset = 0, min_offset = 0;
  bool zero_point = false;  // INT4_ZP: one word holds the scale and the zero point
};
MinFields min_fields(DType type) {
  switch (type) {
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::INT4_ASYM_G32:
    case DType::INT4_ASYM_G64:
    case DType::INT4_ASYM_G128:
    case DType::INT3_ASYM_G64:
    case DType::INT3_ASYM_G128:
    case DType::INT2_ASYM_G64:
    case DType::INT2_ASYM_G128:
      return {true, 0, 2};
    case DType::INT4_ZP_G32:
    case DType::INT4_ZP_G64:
    case DType::INT4_ZP_G128:
      return {true, 0, 0, true};
    default:
      return {};
  }
}

// A weight matrix in some format, and per row the magnitudes |d q_i| + |m_i| used for S.
struct Weights {
  const WeightFormat* format = nullptr;
  int64_t rows = 0, cols = 0, row_bytes = 0;
  std::vector<uint8_t> bytes;
  std::vector<double> magnitude;  // [rows][cols]
  const uint8_t* row(int64_t r) const { return bytes.data() + r * row_bytes; }
};

void fill_magnitudes(Weights& w) {
  const WeightFormat& f = *w.format;
  const MinFields fields = min_fields(f.type);
  w.magnitude.assign(size_t(w.rows * w.cols), 0.0);
  std::vector<float> deq(size_t(w.cols));
  std::vector<uint8_t> patched(size_t(w.row_bytes));
  for (int64_t r = 0; r < w.rows; ++r) {
    double* m = w.magnitude.data() + r * w.cols;
    if (!fields.present) {
      f.dequantize_row(w.row(r), deq.data(), w.cols);
      for (int64_t i = 0; i < w.cols; ++i) m[i] = std::fabs(double(deq[size_t(i)]));
      continue;
    }
    if (fields.zero_point) {
      // INT4_ZP: |s q_i| from the row with every zero point cleared, plus |s z| of the group.
      std::memcpy(patched.data(), w.row(r), size_t(w.row_bytes));
      for (int64_t b = 0; b < w.cols / f.block_size; ++b) patched[size_t(b * f.block_bytes)] = 0;
      f.dequantize_row(patched.data(), deq.data(), w.cols);
      for (int64_t i = 0; i < w.cols; ++i) {
        uint32_t word;
        std::memcpy(&word, w.row(r) + (i / f.block_size) * f.block_bytes, 4);
        m[i] = std::fabs(double(deq[size_t(i)])) + std::fabs(double(quant::zp_scale(word))) * quant::zp_zero(word);
      }
      continue;
    }
    // The scale term alone (min field zeroed), then the min term alone (scale field zeroed).
    for (int64_t zeroed : {fields.min_offset, fields.scale_offset}) {
      std::memcpy(patched.data(), w.row(r), size_t(w.row_bytes));
      for (int64_t b = 0; b < w.cols / f.block_size; ++b) {
        std::memset(patched.data() + f.row_header_bytes + b * f.block_bytes + zeroed, 0, 2);
      }
      f.dequantize_row(patched.data(), deq.data(), w.cols);
      for (int64_t i = 0; i < w.cols; ++i) m[i] += std::fabs(double(deq[size_t(i)]));
    }
  }
}

Weights random_weights(const WeightFormat& format, int64_t rows, int64_t cols, std::mt19937& rng) {
  Weights w;
  w.format = &format;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = quant::row_bytes(format, cols);
  w.bytes.resize(size_t(rows * w.row_bytes));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> src(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    // Rows of different scales, and an offset so asymmetric formats see one-sided groups.
    const float scale = std::ldexp(1.0f, int(r % 5) - 2);
    if (test::is_iq_grid_format(format.type)) {  // random valid blocks: every grid entry, sign and scale
      test::random_iq_grid_row(format.type, cols, scale, rng, w.bytes.data() + r * w.row_bytes);
      continue;
    }
    const float offset = r % 3 == 0 ? 0.5f : 0.0f;
    for (float& v : src) v = scale * (dist(rng) + offset);
    format.quantize_row(src.data(), w.bytes.data() + r * w.row_bytes, cols);
    if (r % 2 == 1) test::randomize_codes(format, w.bytes.data() + r * w.row_bytes, cols, rng);
  }
  fill_magnitudes(w);
  return w;
}

// Activations with a mix of random values and exact rounding ties: half of the 32-element
// blocks get an anchor of +-127 (so Q8_0/Q8_1/Q8_K scale by exactly 1) and values m + 0.5, which
// round half away from zero for Q8_0 and to even for Q8_1/Q8_K; F16/BF16 ties appear too.
std::vector<float> random_activations(int64_t n, int64_t k, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::uniform_int_distribution<int> level(-126, 125);
  std::vector<float> x(size_t(n * k));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t b = 0; b * 32 < k; ++b) {
      const bool ties = (rng() & 1u) != 0;
      for (int64_t i = b * 32; i < std::min(k, b * 32 + 32); ++i) {
        float v = uniform(rng);
        if (ties) v = i == b * 32 ? (rng() & 1u ? 127.0f : -127.0f) : float(level(rng)) + 0.5f;
        if (!ties && (rng() % 8) == 0) v = std::ldexp(1.0f + 0x1p-11f, int(rng() % 4));  // F16 tie
        if (!ties && (rng() % 8) == 0) v = -std::ldexp(1.0f + 0x1p-8f, int(rng() % 4));  // BF16 tie
        x[size_t(t * k + i)] = v;
      }
    }
  }
  return x;
}

// The reference: quant's activation quantizer, then vec_dot, per (row, token); and the S bound.
struct Reference {
  std::vector<float> y;      // [n][rows]
  std::vector<double> size;  // S per (token, row)
};

Reference reference_matmul(const Weights& w, const std::vector<float>& x, int64_t n) {
  const WeightFormat& act = activation_format(*w.format);
  std::vector<uint8_t> a(size_t(quant::row_bytes(act, w.cols)));
  std::vector<float> a_deq(size_t(w.cols));
  Reference ref{std::vector<float>(size_t(n * w.rows)), std::vector<double>(size_t(n * w.rows))};
  for (int64_t t = 0; t < n; ++t) {
    act.quantize_row(x.data() + t * w.cols, a.data(), w.cols);
    act.dequantize_row(a.data(), a_deq.data(), w.cols);
    for (int64_t r = 0; r < w.rows; ++r) {
      ref.y[size_t(t * w.rows + r)] = w.format->vec_dot(w.row(r), a.data(), w.cols);
      double s = 0.0;
      for (int64_t i = 0; i < w.cols; ++i) {
        s += w.magnitude[size_t(r * w.cols + i)] * std::fabs(double(a_deq[size_t(i)]));
      }
      ref.size[size_t(t * w.rows + r)] = s;
    }
  }
  return ref;
}

double tolerance(const WeightFormat& format, int64_t k, double size) {
  const double chain = double(k) / double(activation_format(format).block_size);
  return (2.0 * chain + 16.0) * kU * size + 1e-30;
}

// Runs one table's kernels: converts tokens [0, n) and multiplies rows [row_begin, row_end).
void run_kernels(const FormatKernels& kernels, const Weights& w, const std::vector<float>& x,
                 int64_t n, int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  const int64_t act_row_bytes = kernels.activation_row_bytes(w.cols);
  AlignedBytes act(size_t(std::max<int64_t>(1, n * act_row_bytes)));
  for (int64_t t = 0; t < n; ++t) {
    kernels.convert_activations(x.data() + t * w.cols, act.data() + t * act_row_bytes, w.cols);
  }
  kernels.matmul_tile(w.row(row_begin), w.row_bytes, row_end - row_begin, act.data(), act_row_bytes,
                      n, w.cols, y + row_begin, y_stride);
}

bool same_bits(const float* a, const float* b, size_t count) {
  return std::memcmp(a, b, count * sizeof(float)) == 0;
}

std::string describe(Isa isa, const WeightFormat& format, int64_t rows, int64_t k) {
  return std::string(cpu::isa_name(isa)) + " " + std::string(dtype_name(format.type)) +
         " rows=" + std::to_string(rows) + " k=" + std::to_string(k);
}

// ---------------------------------------------------------------------------------------------
// Every kernel x every format x odd shapes x batch 1..17, against the reference

constexpr int kMaxBatch = 17;

void check_format(Isa isa, const WeightFormat& format, std::mt19937& rng) {
  const FormatKernels* kernels = cpu::find_kernels(*cpu::kernels_for(isa), format.type);
  ASSERT_NE(kernels, nullptr);
  double worst = 0.0;  // largest |kernel - reference| / tolerance seen, reported below
  for (int64_t rows : {1, 3, 17, 67}) {
    for (int64_t k : lengths_for(format)) {
      if (rows == 67 && k > 700) continue;  // keeps the sanitizer run short; 17 rows cover it
      SCOPED_TRACE(describe(isa, format, rows, k));
      const Weights w = random_weights(format, rows, k, rng);
      const std::vector<float> x = random_activations(kMaxBatch, k, rng);
      const Reference ref = reference_matmul(w, x, kMaxBatch);

      // Each token alone, all rows in one call: the results every other run must match bit for bit.
      std::vector<float> alone(size_t(kMaxBatch * rows));
      for (int64_t t = 0; t < kMaxBatch; ++t) {
        const std::vector<float> xt(x.begin() + t * k, x.begin() + (t + 1) * k);
        run_kernels(*kernels, w, xt, 1, 0, rows, alone.data() + t * rows, rows);
      }
      for (int64_t t = 0; t < kMaxBatch; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          const size_t i = size_t(t * rows + r);
          const double tol = tolerance(format, k, ref.size[i]);
          ASSERT_NEAR(alone[i], ref.y[i], tol) << "token " << t << " row " << r << " S=" << ref.size[i];
          worst = std::max(worst, std::fabs(double(alone[i]) - double(ref.y[i])) / tol);
        }
      }
      // Batches of 1..17 tokens, all rows; and the full batch split into row ranges.
      for (int64_t n = 1; n <= kMaxBatch; ++n) {
        std::vector<float> y(size_t(n * rows), std::numeric_limits<float>::quiet_NaN());
        run_kernels(*kernels, w, x, n, 0, rows, y.data(), rows);
        ASSERT_TRUE(same_bits(y.data(), alone.data(), y.size())) << "batch of " << n;
      }
      for (int64_t split : {int64_t(1), rows / 2, rows - 1}) {
        if (split <= 0 || split >= rows) continue;
        std::vector<float> y(size_t(kMaxBatch * rows), std::numeric_limits<float>::quiet_NaN());
        run_kernels(*kernels, w, x, kMaxBatch, 0, split, y.data(), rows);
        run_kernels(*kernels, w, x, kMaxBatch, split, rows, y.data(), rows);
        ASSERT_TRUE(same_bits(y.data(), alone.data(), y.size())) << "rows split at " << split;
      }
    }
  }
  std::printf("  %-7s %-15s largest error / tolerance: %.3f\n", std::string(cpu::isa_name(isa)).c_str(),
              std::string(dtype_name(format.type)).c_str(), worst);
}

class KernelFormatTest : public testing::TestWithParam<DType> {};

TEST_P(KernelFormatTest, MatchesReferenceAndIsBatchInvariant) {
  const WeightFormat& format = quant::require_format(GetParam());
  std::mt19937 rng(uint32_t(GetParam()) * 7919u + 1u);
  for (Isa isa : supported_isas()) check_format(isa, format, rng);
}

std::vector<DType> all_format_types() {
  std::vector<DType> types;
  for (const WeightFormat& format : quant::all_formats()) types.push_back(format.type);
  return types;
}

INSTANTIATE_TEST_SUITE_P(AllFormats, KernelFormatTest, testing::ValuesIn(all_format_types()),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// Identity weights: y[t][r] = the reference's dequantized activation element r, exactly

void set_f16(uint8_t* p, float v) {
  const uint16_t h = float_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Row r of a k x k identity matrix in `format`: one element of value v at r, with every scale a
// power of two so that kernel and reference compute the single product exactly alike.
std::vector<uint8_t> identity_row(const WeightFormat& format, int64_t k, int64_t r) {
  std::vector<uint8_t> row(size_t(quant::row_bytes(format, k)), 0);
  std::vector<float> src(size_t(k), 0.0f);
  const int64_t b = r / std::max<int64_t>(1, format.block_size);
  uint8_t* block = row.data() + format.row_header_bytes + b * format.block_bytes;
  const int64_t i = r % std::max<int64_t>(1, format.block_size);
  switch (format.type) {
    case DType::Q4_K:
    case DType::Q5_K: {  // d = 1, every sub-block scale 1 and min 0, level 1 at i
      set_f16(block, 1.0f);
      const uint8_t scales[12] = {1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
      std::memcpy(block + 4, scales, 12);
      uint8_t* qs = block + (format.type == DType::Q4_K ? 16 : 48);
      qs[(i / 64) * 32 + i % 32] = uint8_t(i % 64 < 32 ? 0x01 : 0x10);
      return row;
    }
    case DType::Q6_K: {  // d = 1, scales 1, levels 32 (zero) except 33 at i
      quant::BlockQ6_K q6{};
      set_f16(reinterpret_cast<uint8_t*>(&q6.d), 1.0f);
      for (int8_t& s : q6.scales) s = 1;
      for (uint8_t& h : q6.qh) h = 0xaa;  // high bits 2 for every element: level 32
      const int half = int(i / 128), l = int(i % 128), quarter = l / 32, pos = l % 32;
      q6.ql[half * 64 + (quarter % 2) * 32 + pos] |= uint8_t(quarter < 2 ? 0x01 : 0x10);
      std::memcpy(block, &q6, sizeof q6);
      return row;
    }
    case DType::Q3_K: {  // d = 1, scale codes 33 (scale 1), levels 4 (zero) except 5 at i
      quant::BlockQ3_K q3{};
      set_f16(reinterpret_cast<uint8_t*>(&q3.d), 1.0f);
      for (int j = 0; j < 8; ++j) q3.scales[j] = 0x11;    // low 4 bits of codes j and j + 8: 1
      for (int j = 8; j < 12; ++j) q3.scales[j] = 0xaa;   // top 2 bits of every code: 2
      for (uint8_t& h : q3.hmask) h = 0xff;               // high bit 1 everywhere: level 4
      const int half = int(i / 128), k4 = int(i % 128) / 32, l = int(i % 32);
      q3.qs[32 * half + l] |= uint8_t(1 << (2 * k4));
      std::memcpy(block, &q3, sizeof q3);
      return row;
    }
    case DType::Q2_K: {  // d = 1, dmin = 1, scale codes 1 and min codes 0, level 0 except 1 at i
      quant::BlockQ2_K q2{};
      set_f16(reinterpret_cast<uint8_t*>(&q2.d), 1.0f);
      set_f16(reinterpret_cast<uint8_t*>(&q2.dmin), 1.0f);
      for (uint8_t& sc : q2.scales) sc = 0x01;
      const int half = int(i / 128), k4 = int(i % 128) / 32, l = int(i % 32);
      q2.qs[32 * half + l] = uint8_t(1 << (2 * k4));
      std::memcpy(block, &q2, sizeof q2);
      return row;
    }
    case DType::Q4_0:
    case DType::INT4_SYM_G32:
    case DType::INT4_SYM_G64:
    case DType::INT4_SYM_G128:
      src[size_t(r)] = -8.0f;  // d = 1, level 0 (value -8); every other element 8 - 8 = 0
      break;
    case DType::Q4_1:
    case DType::INT4_ASYM_G32:
    case DType::INT4_ASYM_G64:
    case DType::INT4_ASYM_G128:
    case DType::INT4_ZP_G32:
    case DType::INT4_ZP_G64:
    case DType::INT4_ZP_G128:
      src[size_t(r)] = 15.0f;  // d = 1, m = 0 (z = 0), level 15
      break;
    case DType::INT3_ASYM_G64:
    case DType::INT3_ASYM_G128:
      src[size_t(r)] = 7.0f;  // d = 1, m = 0, level 7
      break;
    case DType::INT2_ASYM_G64:
    case DType::INT2_ASYM_G128:
      src[size_t(r)] = 3.0f;  // d = 1, m = 0, level 3
      break;
    case DType::Q5_0:
      src[size_t(r)] = -16.0f;  // d = 1, level 0 (value -16)
      break;
    case DType::Q5_1:
      src[size_t(r)] = 31.0f;  // d = 1, m = 0, level 31
      break;
    case DType::FP8_E4M3_PC:
      src[size_t(r)] = 448.0f;  // row scale 1
      break;
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::TQ1_0: case DType::TQ2_0:  // d = 1, level 1 at r
    case DType::MXFP4:  // e = 125 (scale 1/8), level 8
      src[size_t(r)] = 1.0f;
      break;
    default:
      src[size_t(r)] = 127.0f;  // Q8_0, Q8_1, Q8_K, INT8_PC: scale 1, level 127
      break;
  }
  format.quantize_row(src.data(), row.data(), k);
  return row;
}

// The value identity_row puts on the diagonal.
double identity_value(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::INT4_SYM_G32:
    case DType::INT4_SYM_G64:
    case DType::INT4_SYM_G128:
      return -8.0;
    case DType::Q4_1:
    case DType::INT4_ASYM_G32:
    case DType::INT4_ASYM_G64:
    case DType::INT4_ASYM_G128:
    case DType::INT4_ZP_G32:
    case DType::INT4_ZP_G64:
    case DType::INT4_ZP_G128:
      return 15.0;
    case DType::INT3_ASYM_G64:
    case DType::INT3_ASYM_G128:
      return 7.0;
    case DType::INT2_ASYM_G64:
    case DType::INT2_ASYM_G128:
      return 3.0;
    case DType::Q5_0:
      return -16.0;
    case DType::Q5_1:
      return 31.0;
    case DType::FP8_E4M3_PC:
      return 448.0;
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::TQ1_0: case DType::TQ2_0: case DType::MXFP4:
      return 1.0;
    default:
      return 127.0;
  }
}

// IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S (and IQ3_S_L4) and the IQ2/IQ1 grid formats have no zero value, so no row of
// theirs is a row of the identity; their kernels reuse converters checked here (Q4_0's, Q4_K's and
// Q6_K's) and meet the reference within the tight tolerance above, which a misplaced element exceeds.
bool has_identity(DType t) {
  return t != DType::IQ4_NL && t != DType::IQ4_XS && t != DType::IQ3_XXS && t != DType::IQ3_S &&
         t != DType::IQ3_S_L4 && !test::is_iq_grid_format(t);
}

TEST(KernelIdentity, ConvertersAndElementOrderAreExact) {
  std::mt19937 rng(99);
  for (const WeightFormat& format : quant::all_formats()) {
    if (!has_identity(format.type)) continue;
    const int64_t k = lengths_for(format)[std::min<size_t>(2, lengths_for(format).size() - 1)];
    Weights w;
    w.format = &format;
    w.rows = k;
    w.cols = k;
    w.row_bytes = quant::row_bytes(format, k);
    for (int64_t r = 0; r < k; ++r) {
      const std::vector<uint8_t> row = identity_row(format, k, r);
      w.bytes.insert(w.bytes.end(), row.begin(), row.end());
    }
    fill_magnitudes(w);
    constexpr int64_t n = 5;
    const std::vector<float> x = random_activations(n, k, rng);
    const Reference ref = reference_matmul(w, x, n);
    // The identity really is one: the reference returns the dequantized activations.
    const WeightFormat& act = activation_format(format);
    std::vector<uint8_t> a(size_t(quant::row_bytes(act, k)));
    std::vector<float> a_deq(static_cast<size_t>(k));
    act.quantize_row(x.data(), a.data(), k);
    act.dequantize_row(a.data(), a_deq.data(), k);
    const double expect = identity_value(format.type);
    for (int64_t r = 0; r < k; ++r) {
      const double want = expect * double(a_deq[size_t(r)]);
      ASSERT_NEAR(ref.y[size_t(r)], want, 1e-6 * std::fabs(want)) << dtype_name(format.type) << " r=" << r;
    }
    for (Isa isa : supported_isas()) {
      const FormatKernels* kernels = cpu::find_kernels(*cpu::kernels_for(isa), format.type);
      std::vector<float> y(size_t(n * k));
      run_kernels(*kernels, w, x, n, 0, k, y.data(), k);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_EQ(float_to_bits(y[i]), float_to_bits(ref.y[i]))
            << describe(isa, format, k, k) << " token " << i / size_t(k) << " element "
            << i % size_t(k) << ": " << y[i] << " vs " << ref.y[i];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Through CpuBackend, each ISA forced with KESTREL_ISA: reference within tolerance; 1 and 2
// threads and every batch size bitwise equal.

TEST(CpuBackendIsa, EveryIsaThroughTheBackend) {
  std::mt19937 rng(5);
  for (Isa isa : supported_isas()) {
    IsaEnv env(std::string(cpu::isa_name(isa)).c_str());
    auto one = make_cpu_backend(1);
    auto two = make_cpu_backend(2);
    for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K,
                       DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS, DType::IQ3_XXS, DType::IQ3_S,
                       DType::IQ3_S_L4, DType::IQ2_XXS, DType::IQ1_M, DType::TQ1_0, DType::TQ2_0, DType::MXFP4, DType::INT8_PC,
                       DType::INT4_SYM_G128, DType::INT4_ASYM_G32, DType::INT3_ASYM_G128, DType::INT2_ASYM_G64,
                       DType::INT4_ZP_G32, DType::INT4_ZP_G128, DType::FP8_E4M3_PC}) {
      const WeightFormat& format = quant::require_format(type);
      const int64_t rows = 45;
      const int64_t k = lengths_for(format)[1];
      SCOPED_TRACE(describe(isa, format, rows, k));
      const Weights w = random_weights(format, rows, k, rng);
      const WeightView view{type, rows, k, w.bytes.data()};
      const std::vector<float> x = random_activations(kMaxBatch, k, rng);
      const Reference ref = reference_matmul(w, x, kMaxBatch);
      std::vector<float> alone(size_t(kMaxBatch * rows));
      for (int64_t t = 0; t < kMaxBatch; ++t) one->matmul(view, x.data() + t * k, 1, alone.data() + t * rows);
      for (size_t i = 0; i < alone.size(); ++i) {
        ASSERT_NEAR(alone[i], ref.y[i], tolerance(format, k, ref.size[i])) << "i=" << i;
      }
      for (int64_t n : {2, 5, 16, 17}) {
        for (Backend* backend : {one.get(), two.get()}) {
          std::vector<float> y(size_t(n * rows), std::numeric_limits<float>::quiet_NaN());
          backend->matmul(view, x.data(), n, y.data());
          ASSERT_TRUE(same_bits(y.data(), alone.data(), y.size()))
              << "batch " << n << (backend == one.get() ? ", 1 thread" : ", 2 threads");
        }
      }
    }
  }
}

}  // namespace
}  // namespace kestrel
