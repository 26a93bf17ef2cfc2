// GPTQ (src/calib): the lazy-batched, thread-split implementation against the paper's algorithm
// written straight in numpy (scripts/gen_gptq_reference.py; the layers are made from the same
// integer generator on both sides, the reference's encoded bytes and proxy losses are committed),
// GPTQ with a diagonal Hessian giving exactly the format's round-to-nearest bytes, the Hessian
// accumulator against a plain double loop, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/gptq.h"
#include "calib/hessian.h"
#include "calib_layers.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/format.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using Layer = test::CalibLayer;

Layer make_layer(uint64_t seed, int64_t rows, int64_t cols, int64_t tokens, const std::vector<int64_t>& dead) {
  return test::make_calib_layer(seed, rows, cols, tokens, dead);
}

// 2/n X^T X in double, summed token by token.
calib::Hessian plain_hessian(const Layer& l) {
  calib::Hessian h{l.cols, l.tokens, std::vector<double>(size_t(l.cols * l.cols), 0.0)};
  for (int64_t t = 0; t < l.tokens; ++t) {
    const float* x = l.x.data() + t * l.cols;
    for (int64_t a = 0; a < l.cols; ++a) {
      for (int64_t b = 0; b < l.cols; ++b) h.h[size_t(a * l.cols + b)] += double(x[a]) * double(x[b]);
    }
  }
  for (double& v : h.h) v *= 2.0 / double(l.tokens);
  return h;
}

std::string hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) s += digits[b >> 4], s += digits[b & 15];
  return s;
}

nlohmann::json reference() {
  return nlohmann::json::parse(test::read_file(test::test_data_path("gptq/reference.json")));
}

TEST(Gptq, MatchesThePapersAlgorithmInNumpy) {
  const nlohmann::json ref = reference();
  for (const int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (const auto& c : ref["cases"]) {
      SCOPED_TRACE(c["name"].get<std::string>() + " threads " + std::to_string(threads));
      const Layer l = make_layer(c["seed"].get<uint64_t>(), ref["rows"], ref["cols"], ref["tokens"],
                                 c["dead"].get<std::vector<int64_t>>());
      const DType type = *dtype_from_name(c["type"].get<std::string>());
      calib::GptqOptions options;
      options.act_order = c["act_order"];
      options.damp_percent = ref["damp"];
      calib::GptqStats stats;
      const auto encoded = calib::gptq_quantize(type, l.w, l.rows, l.cols, plain_hessian(l), options, pool, &stats,
                                                /*measure_proxy_loss=*/true);
      EXPECT_EQ(hex(encoded), c["encoded"].get<std::string>());
      EXPECT_NEAR(stats.proxy_loss, c["proxy_loss"].get<double>(), 1e-9 * c["proxy_loss"].get<double>());
      EXPECT_NEAR(stats.proxy_loss_baseline, c["proxy_loss_rtn"].get<double>(), 1e-9 * c["proxy_loss_rtn"].get<double>());
      EXPECT_FALSE(stats.kept_baseline);
      // The whole point: the layer's output error is well below round-to-nearest's.
      EXPECT_LT(stats.proxy_loss, 0.5 * stats.proxy_loss_baseline);
      EXPECT_EQ(stats.dead_columns, int64_t(c["dead"].size()));
      EXPECT_EQ(stats.damp_used, options.damp_percent);
      // RTN on the same grid is the format's own quantizer (the reference encodes it itself).
      const quant::WeightFormat& f = quant::require_format(type);
      std::vector<uint8_t> rtn(encoded.size());
      const int64_t row_bytes = quant::row_bytes(f, l.cols);
      for (int64_t r = 0; r < l.rows; ++r) f.quantize_row(l.w.data() + r * l.cols, rtn.data() + r * row_bytes, l.cols);
      EXPECT_EQ(hex(rtn), c["rtn_encoded"].get<std::string>());
    }
  }
}

TEST(Gptq, LazyBatchWidthDoesNotChangeTheResult) {
  const Layer l = make_layer(7, 8, 256, 300, {});
  ThreadPool pool(2);
  const calib::Hessian h = plain_hessian(l);
  calib::GptqOptions a, b;
  a.block_size = 128;
  b.block_size = 32;
  for (bool act_order : {false, true}) {
    a.act_order = b.act_order = act_order;
    EXPECT_EQ(calib::gptq_quantize(DType::INT4_ASYM_G32, l.w, l.rows, l.cols, h, a, pool),
              calib::gptq_quantize(DType::INT4_ASYM_G32, l.w, l.rows, l.cols, h, b, pool));
  }
}

TEST(Gptq, DiagonalHessianGivesRoundToNearest) {
  // No correlation between inputs: no error is worth moving, GPTQ is the format's RTN bit for bit.
  const Layer l = make_layer(5, 12, 256, 1, {});
  ThreadPool pool(2);
  calib::Hessian h{l.cols, 1, std::vector<double>(size_t(l.cols * l.cols), 0.0)};
  for (int64_t c = 0; c < l.cols; ++c) h.h[size_t(c * l.cols + c)] = 1.0 + double(c % 7);
  for (DType type : {DType::INT4_SYM_G32, DType::INT4_SYM_G128, DType::INT4_ASYM_G64, DType::INT4_ASYM_G128,
                     DType::INT4_ZP_G32, DType::INT4_ZP_G128, DType::INT3_ASYM_G64, DType::INT3_ASYM_G128,
                     DType::INT2_ASYM_G64, DType::INT2_ASYM_G128}) {
    const quant::WeightFormat& f = quant::require_format(type);
    const int64_t row_bytes = quant::row_bytes(f, l.cols);
    std::vector<uint8_t> rtn(static_cast<size_t>(l.rows * row_bytes));
    for (int64_t r = 0; r < l.rows; ++r) f.quantize_row(l.w.data() + r * l.cols, rtn.data() + r * row_bytes, l.cols);
    for (bool act_order : {false, true}) {
      calib::GptqOptions o;
      o.act_order = act_order;
      EXPECT_EQ(calib::gptq_quantize(type, l.w, l.rows, l.cols, h, o, pool), rtn) << dtype_name(type) << act_order;
    }
  }
}

// The byte ranges (offset, size) of a k-quant super-block that are not its levels: scales and
// super-block scales.
std::vector<std::pair<int64_t, int64_t>> kquant_header(DType type) {
  using namespace quant;
  switch (type) {
    case DType::Q2_K:
      return {{offsetof(BlockQ2_K, scales), sizeof(BlockQ2_K::scales)}, {offsetof(BlockQ2_K, d), 4}};  // d, dmin
    case DType::Q3_K: return {{offsetof(BlockQ3_K, scales), sizeof(BlockQ3_K::scales) + 2}};          // scales, d
    case DType::Q4_K: return {{0, offsetof(BlockQ4_K, qs)}};                                          // d dmin scales
    case DType::Q5_K: return {{0, offsetof(BlockQ5_K, qh)}};                                          // d dmin scales
    case DType::Q6_K: return {{offsetof(BlockQ6_K, scales), sizeof(BlockQ6_K::scales) + 2}};          // scales, d
    default: return {};
  }
}

TEST(Gptq, KQuantsWithADiagonalHessianGiveTheImportanceWeightedQuantizer) {
  // A k-quant's grids come from its importance-weighted quantizer with the imatrix (half H's
  // diagonal); with nothing to spread GPTQ keeps its bytes exactly, in and out of act-order; with a
  // real Hessian it keeps every block's scales and lowers the output error.
  const Layer l = make_layer(13, 6, 512, 700, {});
  ThreadPool pool(2);
  calib::Hessian diag{l.cols, 1, std::vector<double>(size_t(l.cols * l.cols), 0.0)};
  std::vector<float> importance(static_cast<size_t>(l.cols));
  for (int64_t c = 0; c < l.cols; ++c) {
    diag.h[size_t(c * l.cols + c)] = 1.0 + double(c % 7);
    importance[size_t(c)] = float(diag.h[size_t(c * l.cols + c)] / 2.0);
  }
  const calib::Hessian h = plain_hessian(l);
  std::vector<float> imatrix(static_cast<size_t>(l.cols));
  for (int64_t c = 0; c < l.cols; ++c) imatrix[size_t(c)] = float(h.h[size_t(c * l.cols + c)] / 2.0);
  for (const DType type : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(type));
    const quant::WeightFormat& f = quant::require_format(type);
    const int64_t row_bytes = quant::row_bytes(f, l.cols), block_bytes = row_bytes / (l.cols / 256);
    std::vector<uint8_t> weighted(static_cast<size_t>(l.rows * row_bytes));
    for (int64_t r = 0; r < l.rows; ++r) {
      f.quantize_row_weighted(l.w.data() + r * l.cols, weighted.data() + r * row_bytes, l.cols, importance.data());
    }
    for (bool act_order : {false, true}) {
      calib::GptqOptions o;
      o.act_order = act_order;
      EXPECT_EQ(calib::gptq_quantize(type, l.w, l.rows, l.cols, diag, o, pool), weighted) << act_order;
    }
    calib::GptqOptions o;
    calib::GptqStats stats;
    const auto q = calib::gptq_quantize(type, l.w, l.rows, l.cols, h, o, pool, &stats, true);
    EXPECT_FALSE(stats.kept_baseline);
    EXPECT_LT(stats.proxy_loss, 0.6 * stats.proxy_loss_baseline);  // vs the imatrix-weighted quantizer
    // Static groups: each block's header (scales, d) is the weighted quantizer's on the
    // unquantized row; only the levels moved.
    std::vector<uint8_t> want(static_cast<size_t>(row_bytes));
    for (int64_t r = 0; r < l.rows; ++r) {
      f.quantize_row_weighted(l.w.data() + r * l.cols, want.data(), l.cols, imatrix.data());
      for (int64_t b = 0; b < l.cols / 256; ++b) {
        for (const auto& [offset, size] : kquant_header(type)) {
          const uint8_t* w0 = want.data() + b * block_bytes + offset;
          const uint8_t* g0 = q.data() + r * row_bytes + b * block_bytes + offset;
          EXPECT_EQ(std::vector<uint8_t>(w0, w0 + size), std::vector<uint8_t>(g0, g0 + size)) << r << " " << b;
        }
      }
    }
  }
}

TEST(Gptq, HessianAccumulatorMatchesAPlainSum) {
  // 300 columns: tiles of 128 with a ragged last one; 5000 tokens in two calls, past one slice.
  const Layer l = make_layer(9, 1, 300, 5000, {17});
  ThreadPool pool(3);
  calib::HessianAccumulator acc(l.cols);
  acc.add(l.x.data(), 1800, pool);
  acc.add(l.x.data() + 1800 * l.cols, 3200, pool);
  const calib::Hessian got = acc.hessian(pool), want = plain_hessian(l);
  EXPECT_EQ(got.samples, 5000);
  double max_rel = 0.0;
  for (int64_t a = 0; a < l.cols; ++a) {
    for (int64_t b = 0; b < l.cols; ++b) {
      const double w = want.h[size_t(a * l.cols + b)], g = got.h[size_t(a * l.cols + b)];
      const double scale = std::sqrt(want.h[size_t(a * l.cols + a)] * want.h[size_t(b * l.cols + b)]);
      if (scale == 0.0) {
        EXPECT_EQ(g, 0.0);
        continue;
      }
      max_rel = std::max(max_rel, std::fabs(g - w) / scale);
      EXPECT_EQ(g, got.h[size_t(b * l.cols + a)]);  // symmetric
    }
  }
  // Float products over 4096-token slices, summed in double.
  EXPECT_LT(max_rel, 2e-6);

  // The slices are cut from the rows, not the calls: the same rows in other calls (one row, one
  // call past a whole slice, the rest), or in one, give the same Hessian bit for bit; a different
  // cut (a slice boundary moved) would not, so the comparison can fail.
  calib::HessianAccumulator once(l.cols), split(l.cols);
  once.add(l.x.data(), 5000, pool);
  split.add(l.x.data(), 1, pool);
  split.add(l.x.data() + l.cols, 4500, pool);
  split.add(l.x.data() + 4501 * l.cols, 499, pool);
  EXPECT_EQ(once.hessian(pool).h, got.h);
  EXPECT_EQ(split.hessian(pool).h, got.h);
}

TEST(Gptq, ClearErrors) {
  ThreadPool pool(1);
  const Layer l = make_layer(3, 2, 96, 50, {});
  const calib::Hessian h = plain_hessian(l);
  auto message = [&](DType type, int64_t block) {
    calib::GptqOptions o;
    o.block_size = block;
    try {
      calib::gptq_quantize(type, l.w, l.rows, l.cols, h, o, pool);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(DType::IQ4_XS, 128).find("GPTQ cannot target IQ4_XS: it quantizes to Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, INT4_SYM"),
            std::string::npos);
  EXPECT_NE(message(DType::Q8_0, 128).find("GPTQ cannot target Q8_0"), std::string::npos);
  EXPECT_NE(message(DType::Q4_K, 128).find("96 columns are not a multiple of its blocks of 256"), std::string::npos);
  EXPECT_NE(message(DType::INT4_ASYM_G64, 128).find("96 columns are not a multiple of its blocks of 64"),
            std::string::npos);
  EXPECT_NE(message(DType::INT4_ASYM_G32, 48).find("block size 48 is not a multiple of INT4_ASYM_G32's blocks of 32"),
            std::string::npos);
  calib::HessianAccumulator acc(4);
  const float bad[8] = {1, 2, 3, 4, 5, NAN, 7, 8};
  try {
    acc.add(bad, 2, pool);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 1, channel 1"), std::string::npos) << e.what();
  }
}

// The CLI's dampening: GPTQ's 0.01 from 4 calibration tokens per column of the widest matrix up,
// 0.1 below (the Qwen2.5-Coder-1.5B base's 32 x 512 tokens for its 8,960-wide ffn_down: 0.1).
TEST(Gptq, DefaultDampeningRisesWhenTheCalibrationIsShortForTheWidestMatrix) {
  EXPECT_EQ(calib::default_gptq_damp(32 * 512, 8960), 0.1);
  EXPECT_EQ(calib::default_gptq_damp(128 * 512, 8960), 0.01);
  EXPECT_EQ(calib::default_gptq_damp(128 * 512, 2048), 0.01);
  EXPECT_EQ(calib::default_gptq_damp(4 * 4864, 4864), 0.01);
  EXPECT_EQ(calib::default_gptq_damp(4 * 4864 - 1, 4864), 0.1);
}

}  // namespace
}  // namespace kestrel
