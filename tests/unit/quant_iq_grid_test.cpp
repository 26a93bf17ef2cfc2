// llama.cpp's grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M (Q8_K activations):
//  - blocks dequantize bitwise like gguf-py's numpy code (fixtures from
//    scripts/gen_iq_grid_fixtures.py, whose indices visit every entry of every grid);
//  - the expanded grid tables hold llama.cpp's values (entries spot-checked against ggml-common.h;
//    the fixtures check every entry through gguf-py);
//  - the DType ids, names and sizes are GGML's, and a GGUF file gguf-py wrote with these types
//    loads with the right shapes and the same values, and re-encodes to Q8_0 through requantize;
//  - vec_dot equals the double-precision dot of the dequantized rows within a rounding bound;
//  - the formats are read-only: asking to write one is an error naming the type.
// The SIMD kernels are checked against these references in backend_ops_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

TEST(IQGridReadOnly, WritingTheFormatsIsAClearError) {
  for (const FixtureCase& c : kFixtures) {
    const WeightFormat& format = quant::require_format(c.type);
    EXPECT_EQ(format.quantize_row, nullptr);
    EXPECT_EQ(format.quantize_row_weighted, nullptr);
    for (auto attempt : {+[](DType t) { quant::require_quantizer(t); },
                         +[](DType t) { requantize_type_for(t, 4096, 2); }}) {
      try {
        attempt(c.type);
        FAIL() << c.file << ": writing a read-only format must fail";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::string(dtype_name(c.type))), std::string::npos) << e.what();
      }
    }
    // No recipe makes them (`kestrel quantize ... IQ2_XXS` lists the types it can write).
    EXPECT_FALSE(find_quant_recipe(std::string(dtype_name(c.type))).has_value());
  }
}

}  // namespace
}  // namespace kestrel
