// llama.cpp's grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M (Q8_K activations):
//  - blocks dequantize bitwise like gguf-py's numpy code (fixtures from
//    scripts/gen_iq_grid_fixtures.py, whose indices visit every entry of every grid);
//  - the expanded grid tables hold llama.cpp's values (entries spot-checked against ggml-common.h;
//    the fixtures check every entry through gguf-py);
//  - the DType ids, names and sizes are GGML's, and a GGUF file gguf-py wrote with these types
//    loads with the right shapes and the same values, and re-encodes to Q8_0 through requantize;
//  - vec_dot equals the double-precision dot of the dequantized rows within a rounding bound;
//  - the quantizers put every group on the grid's nearest entry at the step, signs and delta its
//    block stores (brute force over the whole grid), IQ2_XXS/IQ2_XS's parity by the best single
//    flip, IQ1's delta by the better sign; error falls with the bits and with importance;
//  - the recipes (llama.cpp's file types, the imatrix requirement, the IQ4_NL fallback).
// The SIMD kernels are checked against these references in backend_ops_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "convert/quant_recipe.h"
#include "convert/requantize.h"
#include "core/error.h"
#include "core/half.h"
#include "iq_grid_blocks.h"
#include "loader/gguf_reader.h"
#include "quant/format.h"
#include "quant/iq_grids.h"
#include "quant_fixture.h"

namespace kestrel {
namespace {

using quant::WeightFormat;

constexpr double kU = 0x1p-24;  // unit roundoff of float

struct FixtureCase {
  const char* file;
  DType type;
  uint32_t ggml_id;  // ggml.h's GGML_TYPE_*
  int64_t block_bytes;
};
const FixtureCase kFixtures[] = {{"iq2_xxs.bin", DType::IQ2_XXS, 16, 66},
                                 {"iq2_xs.bin", DType::IQ2_XS, 17, 74},
                                 {"iq2_s.bin", DType::IQ2_S, 22, 82},
                                 {"iq1_s.bin", DType::IQ1_S, 19, 50},
                                 {"iq1_m.bin", DType::IQ1_M, 29, 56}};

std::vector<float> dequantize(const WeightFormat& f, const uint8_t* bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  f.dequantize_row(bytes, out.data(), n);
  return out;
}

TEST(IQGridFixture, DequantizeIsBitwiseEqualToGgufPy) {
  for (const FixtureCase& c : kFixtures) {
    const test::QuantFixture f = test::read_quant_fixture(c.file);
    const WeightFormat& format = quant::require_format(c.type);
    ASSERT_EQ(f.ggml_type, uint32_t(c.type)) << c.file;
    ASSERT_EQ(int64_t(f.block_bytes), format.block_bytes) << c.file;
    ASSERT_EQ(int64_t(f.block_size), format.block_size) << c.file;
    const int64_t n = int64_t(f.blocks) * f.block_size;
    const std::vector<float> ours = dequantize(format, f.raw.data(), n);
    size_t nonzero = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      ASSERT_EQ(float_to_bits(ours[i]), float_to_bits(f.gguf_py[i]))
          << c.file << " value " << i << ": ours " << ours[i] << ", gguf-py " << f.gguf_py[i];
      nonzero += ours[i] != 0.0f;
    }
    EXPECT_GT(nonzero, ours.size() / 2) << c.file;  // not a file of zeros
  }
}

TEST(IQGridTables, EntriesAreLlamaCppsValues) {
  // First and last entries of each table in ggml-common.h (llama.cpp), and a few in between.
  EXPECT_EQ(quant::kIQ2XXSGrid[0], 0x0808080808080808u);
  EXPECT_EQ(quant::kIQ2XXSGrid[1], 0x080808080808082bu);
  EXPECT_EQ(quant::kIQ2XXSGrid[3], 0x0808080808082b08u);
  EXPECT_EQ(quant::kIQ2XXSGrid[255], 0x2b2b2b1908081908u);
  EXPECT_EQ(quant::kIQ2XSGrid[2], 0x0808080808081919u);
  EXPECT_EQ(quant::kIQ2XSGrid[511], 0x2b2b2b2b2b2b2b2bu);
  EXPECT_EQ(quant::kIQ2XSGrid[508], 0x2b2b2b2b082b2b08u);
  EXPECT_EQ(quant::kIQ2SGrid[1023], 0x2b2b2b2b2b2b2b2bu);
  EXPECT_EQ(quant::kIQ2SGrid[1020], 0x2b2b2b2b082b082bu);
  EXPECT_EQ(quant::kIQ1SGrid[0], 0xffffffffffffffffu);
  EXPECT_EQ(quant::kIQ1SGrid[1], 0xffffffffffffff01u);
  EXPECT_EQ(quant::kIQ1SGrid[2], 0xffffffffffff0000u);
  EXPECT_EQ(quant::kIQ1SGrid[2044], 0x010101010101ffffu);
  EXPECT_EQ(quant::kIQ1SGrid[2047], 0x0101010101010101u);
  // ksigns_iq2xs: the 7 given bits, and bit 7 set when they hold an odd number of ones.
  for (int i = 0; i < 128; ++i) {
    const int parity = __builtin_popcount(unsigned(i)) & 1;
    ASSERT_EQ(quant::kIQ2SignBits[i], uint8_t(i | parity << 7)) << i;
  }
  EXPECT_EQ(quant::kIQ2SignBits[1], 129);
  // Every IQ2 byte is 8, 25 or 43 and every IQ1 byte -1, 0 or 1.
  for (const auto* grid : {quant::kIQ2XXSGrid.data(), quant::kIQ2XSGrid.data(), quant::kIQ2SGrid.data()}) {
    for (int i = 0; i < 256; ++i) {
      for (int j = 0; j < 8; ++j) {
        const int v = quant::iq_grid_value(grid[i], j);
        ASSERT_TRUE(v == 8 || v == 25 || v == 43) << i;
      }
    }
  }
  for (uint64_t entry : quant::kIQ1SGrid) {
    for (int j = 0; j < 8; ++j) ASSERT_LE(std::abs(quant::iq1_grid_value(entry, j)), 1);
  }
}

TEST(IQGridFixture, TypeIdsNamesAndSizesAreGgmls) {
  for (const FixtureCase& c : kFixtures) {
    EXPECT_EQ(uint32_t(c.type), c.ggml_id) << c.file;
    const DTypeLayout layout = dtype_layout(c.type);
    const WeightFormat& format = quant::require_format(c.type);
    EXPECT_EQ(layout.block_size, 256);
    EXPECT_EQ(format.block_size, 256);
    EXPECT_EQ(layout.block_bytes, c.block_bytes) << c.file;
    EXPECT_EQ(format.block_bytes, c.block_bytes) << c.file;
    EXPECT_EQ(format.activation_type, DType::Q8_K);
    EXPECT_EQ(dtype_from_name(std::string(dtype_name(c.type))), c.type);
  }
  EXPECT_EQ(dtype_name(DType::IQ2_XXS), "IQ2_XXS");
  EXPECT_EQ(dtype_from_name("iq1_m"), DType::IQ1_M);
  EXPECT_EQ(dtype_row_bytes(DType::IQ1_S, 512), 2 * 50);
}

TEST(IQGridFixture, GgufFileFromGgufPyLoadsAndReencodes) {
  // iq_grid.gguf holds the fixtures' blocks as 8-row matrices (gen_iq_grid_fixtures.py).
  const std::string path = std::string(KESTREL_TEST_DATA) + "/quant/iq_grid.gguf";
  const auto file = gguf::GgufFile::open(path);
  EXPECT_EQ(file->get_uint("general.file_type"), 19u);  // LLAMA_FTYPE_MOSTLY_IQ2_XXS
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
    const std::vector<float> values = dequantize(quant::require_format(c.type), t->data, n);
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(float_to_bits(values[i]), float_to_bits(f.gguf_py[i])) << name << " value " << i;
    }
  }
  // Read as a source: re-encoded to Q8_0, every matrix holds exactly Q8_0's quantization of the
  // gguf-py values (requantize dequantizes with our reference, then quantizes).
  const std::string out = (std::filesystem::temp_directory_path() / "kestrel_iq_grid_q8_0.gguf").string();
  requantize_gguf(path, out, DType::Q8_0, [](const RequantizeNote&) {});
  const auto q8 = gguf::GgufFile::open(out);
  const WeightFormat& q8_0 = quant::require_format(DType::Q8_0);
  for (const FixtureCase& c : kFixtures) {
    const test::QuantFixture f = test::read_quant_fixture(c.file);
    std::string name = c.file;
    name.replace(name.find(".bin"), 4, ".weight");
    const gguf::TensorInfo* t = q8->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(t->type, DType::Q8_0);
    const int64_t n = int64_t(f.gguf_py.size());
    std::vector<uint8_t> expected(size_t(quant::row_bytes(q8_0, n)));
    q8_0.quantize_row(f.gguf_py.data(), expected.data(), n);
    ASSERT_EQ(t->num_bytes, expected.size()) << name;
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), t->data)) << name;
  }
  std::filesystem::remove(out);
}

TEST(IQGridDot, MatchesTheDequantizedDot) {
  // Random valid blocks (every byte random, d finite) and the fixtures' blocks, against random
  // activations: the reference's exact integer sums leave one rounding per super-block.
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const WeightFormat& act = quant::require_format(DType::Q8_K);
  for (const FixtureCase& c : kFixtures) {
    const WeightFormat& format = quant::require_format(c.type);
    const test::QuantFixture f = test::read_quant_fixture(c.file);
    for (int trial = 0; trial < 24; ++trial) {
      const int64_t n = 256 * (1 + trial % 4);
      std::vector<uint8_t> row = test::random_iq_grid_rows(c.type, 1, n, std::ldexp(1.0f, trial % 7 - 3), rng);
      // Every third trial: fixture blocks from the third on (subnormal d, d = 65504, normal d).
      const int64_t fixture_offset = 2 * format.block_bytes;
      if (trial % 3 == 0 && int64_t(f.raw.size()) >= fixture_offset + quant::row_bytes(format, n)) {
        row.assign(f.raw.begin() + fixture_offset, f.raw.begin() + fixture_offset + quant::row_bytes(format, n));
      }
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = dist(rng);
      std::vector<uint8_t> a(size_t(quant::row_bytes(act, n)));
      act.quantize_row(x.data(), a.data(), n);
      const std::vector<float> w_deq = dequantize(format, row.data(), n), a_deq = dequantize(act, a.data(), n);
      double exact = 0.0, size = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(w_deq[size_t(i)]) * a_deq[size_t(i)];
        size += std::fabs(double(w_deq[size_t(i)]) * a_deq[size_t(i)]);
      }
      const double got = format.vec_dot(row.data(), a.data(), n);
      // Dequantized values are rounded once or twice each (scale products), the dot once per
      // super-block: a few units of roundoff of the sum of magnitudes.
      EXPECT_NEAR(got, exact, (double(n) / 256 + 8) * 4 * kU * size + 1e-30) << c.file << " trial " << trial;
      EXPECT_GT(size, 0.0);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The quantizers (iq_grid_quantize.cpp), checked from the stored bytes: each group of 8 is decoded
// from the layout (its step, grid entry, signs or delta) and compared with every entry of the grid.

struct StoredGroup {
  float step = 0.0f;
  int entry = 0;
  uint8_t negative = 0;  // IQ2: bit i set where value i is stored negative
  float delta = 0.0f;    // IQ1: +-1/8
};

bool is_iq1(DType type) { return type == DType::IQ1_S || type == DType::IQ1_M; }

// Group l (0..3) of sub-block j (0..7) of one super-block.
StoredGroup stored_group(DType type, const uint8_t* block, int j, int l) {
  StoredGroup g;
  auto iq2_step = [](uint16_t d, int code) { return fp16_to_float(d) * (0.5f + float(code)) * 0.25f; };
  if (type == DType::IQ2_XXS) {
    const auto& b = *reinterpret_cast<const quant::BlockIQ2_XXS*>(block);
    const uint32_t indices = b.qs[4 * j] | uint32_t(b.qs[4 * j + 1]) << 16;
    const uint32_t signs = b.qs[4 * j + 2] | uint32_t(b.qs[4 * j + 3]) << 16;
    g = {iq2_step(b.d, int(signs >> 28)), int(indices >> (8 * l) & 255), quant::kIQ2SignBits[signs >> (7 * l) & 127]};
  } else if (type == DType::IQ2_XS) {
    const auto& b = *reinterpret_cast<const quant::BlockIQ2_XS*>(block);
    const uint16_t q = b.qs[4 * j + l];
    g = {iq2_step(b.d, b.scales[j] >> (4 * (l / 2)) & 15), q & 511, quant::kIQ2SignBits[q >> 9]};
  } else if (type == DType::IQ2_S) {
    const auto& b = *reinterpret_cast<const quant::BlockIQ2_S*>(block);
    g = {iq2_step(b.d, b.scales[j] >> (4 * (l / 2)) & 15), quant::iq2s_index(b, j, l), b.qs[32 + 4 * j + l]};
  } else if (type == DType::IQ1_S) {
    const auto& b = *reinterpret_cast<const quant::BlockIQ1_S*>(block);
    g.step = fp16_to_float(b.d) * float(2 * (b.qh[j] >> 12 & 7) + 1);
    g.entry = quant::iq1s_index(b, j, l);
    g.delta = b.qh[j] & 0x8000 ? -quant::kIQ1Delta : quant::kIQ1Delta;
  } else {
    const auto& b = *reinterpret_cast<const quant::BlockIQ1_M*>(block);
    g.step = fp16_to_float(quant::iq1m_d_bits(b)) * float(2 * quant::iq1m_scale(b, j, l / 2) + 1);
    g.entry = quant::iq1m_index(b, j, l);
    g.delta = quant::iq1m_delta_sign(b, j, l) < 0 ? -quant::kIQ1Delta : quant::kIQ1Delta;
  }
  return g;
}

int grid_size(DType type) {
  return type == DType::IQ2_XXS ? 256 : type == DType::IQ2_XS ? 512 : type == DType::IQ2_S ? 1024 : 2048;
}
double grid_level(DType type, int e, int i) {
  switch (type) {
    case DType::IQ2_XXS: return quant::iq_grid_value(quant::kIQ2XXSGrid[size_t(e)], i);
    case DType::IQ2_XS: return quant::iq_grid_value(quant::kIQ2XSGrid[size_t(e)], i);
    case DType::IQ2_S: return quant::iq_grid_value(quant::kIQ2SGrid[size_t(e)], i);
    default: return quant::iq1_grid_value(quant::kIQ1SGrid[size_t(e)], i);
  }
}

// The weighted squared distance of the targets t to entry e, in double.
double entry_cost(DType type, int e, const double* t, const double* w) {
  double c = 0.0;
  for (int i = 0; i < 8; ++i) c += w[i] * (t[i] - grid_level(type, e, i)) * (t[i] - grid_level(type, e, i));
  return c;
}
double best_cost(DType type, const double* t, const double* w) {
  double best = INFINITY;
  for (int e = 0; e < grid_size(type); ++e) best = std::min(best, entry_cost(type, e, t, w));
  return best;
}

// The group's targets: IQ2 magnitudes over the step, negated where the stored sign is not the
// value's own (negative: the stored signs); IQ1 values over the step less the delta.
void targets(DType type, const float* x, float step, uint8_t negative, float delta, double* t) {
  for (int i = 0; i < 8; ++i) {
    if (is_iq1(type)) {
      t[i] = double(x[i]) / step - delta;
    } else {
      const bool flipped = (x[i] < 0.0f) != ((negative >> i & 1) != 0);
      t[i] = (flipped ? -1.0 : 1.0) * std::fabs(double(x[i])) / step;
    }
  }
}

// Gaussian rows with a few outliers, and a heavy-tailed importance per column.
std::vector<float> gaussian_row(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n), 0.0f);
  for (float& v : x) v = dist(rng) * ((rng() % 50) == 0 ? 4.0f : 1.0f);
  return x;
}
std::vector<float> importance_row(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> m(static_cast<size_t>(n));
  for (float& v : m) v = std::exp(1.5f * dist(rng));
  return m;
}

std::vector<uint8_t> quantize(const WeightFormat& f, const std::vector<float>& x, const float* importance) {
  std::vector<uint8_t> bytes(size_t(quant::row_bytes(f, int64_t(x.size()))));
  quant::quantize_row_with_importance(f, x.data(), bytes.data(), int64_t(x.size()), importance);
  return bytes;
}

// sum m (x - y)^2 / sum m x^2 over the row.
double relative_error(const WeightFormat& f, const std::vector<float>& x, const std::vector<uint8_t>& bytes,
                      const std::vector<float>& m) {
  const std::vector<float> y = dequantize(f, bytes.data(), int64_t(x.size()));
  double e = 0.0, s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += m[i] * (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    s += m[i] * double(x[i]) * x[i];
  }
  return e / s;
}

TEST(IQGridQuantizer, EveryGroupIsTheNearestEntryAtTheStoredStepSignsAndDelta) {
  // Without and with importance (w = importance * sqrt(2 mean x^2 + x^2) per super-block, as
  // llama.cpp weighs), every group's entry is the grid's nearest to its targets by brute force over
  // the whole grid; IQ2_XXS/IQ2_XS store at most one sign that is not the value's own, exactly
  // when the group has an odd number of negative values, and that flip is the best single flip;
  // IQ1's delta sign (per 32 values for IQ1_S, per group for IQ1_M) is the better of the two.
  std::mt19937 rng(11);
  constexpr int64_t n = 512;
  for (const FixtureCase& c : kFixtures) {
    const WeightFormat& f = quant::require_format(c.type);
    const bool parity = c.type == DType::IQ2_XXS || c.type == DType::IQ2_XS;
    int flips = 0, groups = 0;
    for (int trial = 0; trial < 4; ++trial) {
      const std::vector<float> x = gaussian_row(n, rng), m = importance_row(n, rng);
      const bool weighted = trial % 2 == 1;
      const std::vector<uint8_t> bytes = quantize(f, x, weighted ? m.data() : nullptr);
      for (int64_t b = 0; b < n / 256; ++b) {
        const float* xb = x.data() + 256 * b;
        double w[256], sigma2 = 0.0;
        for (int i = 0; i < 256; ++i) sigma2 += double(xb[i]) * xb[i];
        sigma2 *= 2.0 / 256.0;
        for (int i = 0; i < 256; ++i) w[i] = weighted ? m[size_t(256 * b + i)] * std::sqrt(sigma2 + double(xb[i]) * xb[i]) : 1.0;
        double sub_cost[8][2] = {};  // IQ1_S: per sub-block, at the stored delta and the other one
        for (int j = 0; j < 8; ++j) {
          for (int l = 0; l < 4; ++l) {
            const StoredGroup g = stored_group(c.type, bytes.data() + b * c.block_bytes, j, l);
            if (!(g.step > 0.0f)) continue;
            const int o = 32 * j + 8 * l;
            double t[8];
            targets(c.type, xb + o, g.step, g.negative, g.delta, t);
            const double stored = entry_cost(c.type, g.entry, t, w + o);
            const double tolerance = 1e-5 * stored + 1e-9;
            ASSERT_LE(stored, best_cost(c.type, t, w + o) + tolerance) << c.file << " trial " << trial << " group " << o;
            ++groups;
            if (parity) {
              int own_negatives = 0, flipped = 0;
              uint8_t own = 0;  // the values' own signs
              for (int i = 0; i < 8; ++i) {
                own_negatives += xb[o + i] < 0.0f;
                own |= uint8_t((xb[o + i] < 0.0f) << i);
                flipped += (xb[o + i] < 0.0f) != ((g.negative >> i & 1) != 0);
              }
              ASSERT_EQ(flipped, own_negatives % 2) << c.file << " group " << o;
              if (flipped == 1) {
                ++flips;
                for (int i = 0; i < 8; ++i) {  // every other single flip is no better
                  double other[8];
                  targets(c.type, xb + o, g.step, uint8_t(own ^ (1u << i)), 0.0f, other);
                  ASSERT_LE(stored, best_cost(c.type, other, w + o) + tolerance) << c.file << " flip " << i;
                }
              }
            }
            if (is_iq1(c.type)) {
              double other[8];
              targets(c.type, xb + o, g.step, 0, -g.delta, other);
              const double with_other = best_cost(c.type, other, w + o);
              if (c.type == DType::IQ1_M) {
                ASSERT_LE(stored, with_other + tolerance) << c.file << " group " << o;
              }
              sub_cost[j][0] += stored;
              sub_cost[j][1] += with_other;
            }
          }
          if (c.type == DType::IQ1_S) {
            EXPECT_LE(sub_cost[j][0], sub_cost[j][1] * (1 + 1e-5) + 1e-9) << "sub-block " << j;
          }
        }
      }
    }
    EXPECT_EQ(groups, 4 * 2 * 32) << c.file;  // every group had a nonzero step
    if (parity) {
      EXPECT_GT(flips, 100) << c.file;  // about half the groups have an odd count
    }
  }
}

TEST(IQGridQuantizer, ErrorFallsWithBitsAndImportanceLowersTheWeightedError) {
  // On the same Gaussian rows: 1.56 (IQ1_S) > 1.75 (IQ1_M) > 2.06 (IQ2_XXS) > 2.31 (IQ2_XS) > 2.56
  // (IQ2_S) bits per value, in that order of error; each type's weighted quantizer has a lower
  // importance-weighted error than its unweighted one.
  std::mt19937 rng(5);
  constexpr int64_t n = 4096;
  const std::vector<float> x = gaussian_row(n, rng), m = importance_row(n, rng);
  const DType by_bits[] = {DType::IQ1_S, DType::IQ1_M, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S};
  double previous = 1.0;
  for (DType type : by_bits) {
    const WeightFormat& f = quant::require_format(type);
    const double plain = relative_error(f, x, quantize(f, x, nullptr), m);
    const double weighted = relative_error(f, x, quantize(f, x, m.data()), m);
    EXPECT_LT(plain, previous) << dtype_name(type);
    EXPECT_LT(weighted, 0.9 * plain) << dtype_name(type);
    previous = plain;
  }
}

TEST(IQGridQuantizer, Iq1KeepsTheWeightedNormWhereLeastSquaresWouldShrinkIt) {
  // IQ1 stores the step that keeps each block's weighted norm (sum w q^2 = sum w x^2 before the
  // step is rounded to its code and the groups re-assigned): on a whole model the least-squares
  // step, which shrinks every matrix, did worse. Over a row the reconstruction's weighted norm
  // stays near the original's; the least-squares IQ2 reconstructions are smaller.
  std::mt19937 rng(9);
  constexpr int64_t n = 4096;
  const std::vector<float> x = gaussian_row(n, rng), m = importance_row(n, rng);
  for (const FixtureCase& c : kFixtures) {
    const WeightFormat& f = quant::require_format(c.type);
    const std::vector<float> y = dequantize(f, quantize(f, x, m.data()).data(), n);
    double xx = 0.0, yy = 0.0;  // weighted as the quantizer weighs: m sqrt(2 mean x^2 + x^2) per 256
    for (int64_t b = 0; b < n / 256; ++b) {
      double sigma2 = 0.0;
      for (int64_t i = 256 * b; i < 256 * b + 256; ++i) sigma2 += double(x[size_t(i)]) * x[size_t(i)];
      sigma2 *= 2.0 / 256.0;
      for (int64_t i = 256 * b; i < 256 * b + 256; ++i) {
        const double w = m[size_t(i)] * std::sqrt(sigma2 + double(x[size_t(i)]) * x[size_t(i)]);
        xx += w * double(x[size_t(i)]) * x[size_t(i)];
        yy += w * double(y[size_t(i)]) * y[size_t(i)];
      }
    }
    const double ratio = std::sqrt(yy / xx);
    std::printf("  %s weighted norm ratio %.4f\n", c.file, ratio);
    if (is_iq1(c.type)) {
      EXPECT_GT(ratio, 0.975) << c.file;  // the least-squares step gave 0.945 (IQ1_S), 0.970 (IQ1_M)
      EXPECT_LT(ratio, 1.03) << c.file;
    } else {
      EXPECT_LT(ratio, 0.99) << c.file;
    }
  }
}

TEST(IQGridQuantizer, ZeroRowsStayZeroAndRecipesNeedAnImatrix) {
  for (const FixtureCase& c : kFixtures) {
    const WeightFormat& f = quant::require_format(c.type);
    const std::vector<float> zeros(512, 0.0f);
    for (float v : dequantize(f, quantize(f, zeros, nullptr).data(), 512)) ASSERT_EQ(v, 0.0f) << c.file;
    // Like llama-quantize, `kestrel quantize` needs an importance matrix for these types; rows
    // that are not a multiple of 256 fall back to IQ4_NL. (Which tensors take them under each file
    // type: requantize_test's comparison with llama-quantize.)
    EXPECT_TRUE(requires_imatrix("blk.0.attn_q.weight", c.type, pure_quant_recipe(c.type)));
    EXPECT_FALSE(requires_imatrix("token_embd.weight", c.type, pure_quant_recipe(c.type)));
    EXPECT_EQ(pure_quant_recipe(c.type).base, c.type);
    EXPECT_EQ(quant_type_that_fits(c.type, 896), DType::IQ4_NL);
    EXPECT_EQ(quant_type_that_fits(c.type, 1024), c.type);
  }
  // LLAMA_FTYPE_MOSTLY_*: llama-quantize --pure writes 19, 20, 29 (IQ2_M: GGML IQ2_S), 24, 31.
  EXPECT_EQ(pure_quant_recipe(DType::IQ2_XXS).file_type, 19u);
  EXPECT_EQ(pure_quant_recipe(DType::IQ2_XS).file_type, 20u);
  EXPECT_EQ(pure_quant_recipe(DType::IQ2_S).file_type, 29u);
  EXPECT_EQ(pure_quant_recipe(DType::IQ1_S).file_type, 24u);
  EXPECT_EQ(pure_quant_recipe(DType::IQ1_M).file_type, 31u);
  // llama.cpp 0.3.36 requires one for IQ3_XXS too, and for Q2_K only in a Q2_K_S file.
  EXPECT_TRUE(requires_imatrix("blk.0.attn_q.weight", DType::IQ3_XXS, *find_quant_recipe("IQ3_XXS")));
  EXPECT_FALSE(requires_imatrix("blk.0.attn_q.weight", DType::Q2_K, *find_quant_recipe("Q2_K")));
  EXPECT_TRUE(requires_imatrix("blk.0.attn_q.weight", DType::Q2_K, *find_quant_recipe("Q2_K_S")));
}

}  // namespace
}  // namespace kestrel
