// AWQ (src/calib/awq.h): the scale search and the clipping search against AutoAWQ's algorithm
// written straight in numpy (scripts/gen_awq_reference.py: the same layers from the same integer
// generator on both sides; the reference's chosen ratio, scales, output errors, clipped groups and
// final bytes are committed), the block moments against a plain double loop, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/awq.h"
#include "calib_layers.h"
#include "core/error.h"
#include "quant/format.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::string hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) s += digits[b >> 4], s += digits[b & 15];
  return s;
}

std::vector<float> abs_mean(const test::CalibLayer& l) {
  std::vector<float> m(static_cast<size_t>(l.cols));
  for (int64_t c = 0; c < l.cols; ++c) {
    double sum = 0.0;
    for (int64_t t = 0; t < l.tokens; ++t) sum += std::fabs(double(l.x[size_t(t * l.cols + c)]));
    m[size_t(c)] = float(sum / double(l.tokens));
  }
  return m;
}

TEST(Awq, MatchesTheNumpyReference) {
  const auto ref = nlohmann::json::parse(test::read_file(test::test_data_path("awq/reference.json")));
  const int64_t cols = ref["cols"], tokens = ref["tokens"];
  ThreadPool pool(2);
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    int64_t total_rows = 0;
    for (const auto& l : c["layers"]) total_rows += l["rows"].get<int64_t>();
    test::CalibLayer layer = test::make_calib_layer(c["seed"].get<uint64_t>(), total_rows, cols, tokens, {});
    std::vector<calib::AwqLinear> linears;
    int64_t r0 = 0;
    for (const auto& l : c["layers"]) {
      const DType type = *dtype_from_name(l["type"].get<std::string>());
      linears.push_back({type, layer.w.data() + r0 * cols, l["rows"].get<int64_t>()});
      r0 += l["rows"].get<int64_t>();
    }
    const std::vector<float> mean = abs_mean(layer);
    const calib::AwqInput input{cols, layer.x.data(), tokens, mean, {}, {}};
    calib::AwqTying tying;
    if (!c["tying"].is_null()) tying = {c["tying"][0], c["tying"][1], c["tying"][2]};
    calib::AwqOptions options;
    options.duo_scaling = c["duo_scaling"];
    const calib::AwqScaleResult result = calib::awq_search_scales(linears, input, tying, options, pool);

    EXPECT_EQ(result.grid, c["grid"].get<int>());
    ASSERT_EQ(result.scales.size(), c["scales"].size());
    for (size_t i = 0; i < result.scales.size(); ++i) {
      EXPECT_NEAR(result.scales[i], c["scales"][i].get<double>(), 1e-6 * std::fabs(c["scales"][i].get<double>()))
          << "channel " << i;
    }
    // The output errors: the reference multiplies in double, Kestrel in float.
    EXPECT_NEAR(result.loss, c["loss"].get<double>(), 1e-4 * c["loss"].get<double>());
    EXPECT_NEAR(result.loss_unscaled, c["loss_unscaled"].get<double>(), 1e-4 * c["loss_unscaled"].get<double>());
    EXPECT_LT(result.loss, 0.95 * result.loss_unscaled);  // the channels 8x larger make scaling pay

    calib::awq_scale_columns(linears, cols, result.scales, pool);
    int64_t clipped = 0;
    for (size_t i = 0; i < linears.size(); ++i) {
      if (!c["layers"][i]["clip"].get<bool>()) continue;
      const quant::WeightFormat& f = quant::require_format(linears[i].type);
      const calib::BlockMoments m = calib::block_moments(layer.x.data(), tokens, cols, f.block_size, pool);
      const calib::AwqClipResult clip = calib::awq_clip(linears[i], cols, m, result.scales, {}, options, pool);
      EXPECT_LT(clip.loss, clip.loss_unclipped);
      EXPECT_EQ(clip.groups, linears[i].rows * cols / f.block_size);
      clipped += clip.clipped;
    }
    EXPECT_EQ(clipped, c["clipped"].get<int64_t>());
    for (size_t i = 0; i < linears.size(); ++i) {
      const quant::WeightFormat& f = quant::require_format(linears[i].type);
      std::vector<uint8_t> bytes(static_cast<size_t>(linears[i].rows * quant::row_bytes(f, cols)));
      for (int64_t r = 0; r < linears[i].rows; ++r) {
        f.quantize_row(linears[i].w + r * cols, bytes.data() + r * quant::row_bytes(f, cols), cols);
      }
      EXPECT_EQ(hex(bytes), c["encoded"][i].get<std::string>()) << "layer " << i;
    }
  }
}

// The gate/up group with its error measured at the MLP's output (AutoAWQ's module2inspect),
// through a float down projection, SiLU and GELU: the same ratio, scales and errors as numpy.
TEST(Awq, MlpOutputErrorMatchesTheNumpyReference) {
  const auto ref = nlohmann::json::parse(test::read_file(test::test_data_path("awq/reference.json")));
  const int64_t cols = ref["cols"], tokens = ref["tokens"];
  ASSERT_EQ(ref["mlp_cases"].size(), 2u);
  ThreadPool pool(2);
  for (const auto& c : ref["mlp_cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int64_t n_ff = c["n_ff"], n_embd = c["n_embd"];
    test::CalibLayer layer = test::make_calib_layer(c["seed"].get<uint64_t>(), 2 * n_ff, cols, tokens, {});
    const test::CalibLayer down = test::make_calib_layer(c["seed"].get<uint64_t>() + 1, n_embd, n_ff, 1, {});
    const DType type = *dtype_from_name(c["type"].get<std::string>());
    const calib::AwqLinear linears[2] = {{type, layer.w.data(), n_ff}, {type, layer.w.data() + n_ff * cols, n_ff}};
    const std::vector<float> mean = abs_mean(layer);
    const calib::AwqInput input{cols, layer.x.data(), tokens, mean, {}, {}};
    const calib::AwqMlp mlp{down.w.data(), n_embd, c["gelu"].get<bool>(), nullptr, nullptr};
    const calib::AwqScaleResult result = calib::awq_search_scales(linears, input, {}, {}, pool, &mlp);
    EXPECT_EQ(result.grid, c["grid"].get<int>());
    ASSERT_EQ(result.scales.size(), c["scales"].size());
    for (size_t i = 0; i < result.scales.size(); ++i) {
      EXPECT_NEAR(result.scales[i], c["scales"][i].get<double>(), 1e-6 * std::fabs(c["scales"][i].get<double>()));
    }
    EXPECT_NEAR(result.loss, c["loss"].get<double>(), 1e-4 * c["loss"].get<double>());
    EXPECT_NEAR(result.loss_unscaled, c["loss_unscaled"].get<double>(), 1e-4 * c["loss_unscaled"].get<double>());
    // The MLP's error needs both halves.
    EXPECT_THROW(calib::awq_search_scales({linears, 1}, input, {}, {}, pool, &mlp), Error);
  }
}

TEST(Awq, BlockMomentsAreTheGroupsSecondMoments) {
  const test::CalibLayer l = test::make_calib_layer(17, 1, 96, 5000, {});
  ThreadPool pool(2);
  const calib::BlockMoments m = calib::block_moments(l.x.data(), l.tokens, l.cols, 32, pool);
  ASSERT_EQ(m.blocks.size(), size_t(96 * 32));
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t i = 0; i < 32; ++i) {
      for (int64_t j = 0; j < 32; ++j) {
        double sum = 0.0;
        for (int64_t t = 0; t < l.tokens; ++t) {
          sum += double(l.x[size_t(t * 96 + b * 32 + i)]) * double(l.x[size_t(t * 96 + b * 32 + j)]);
        }
        const double want = sum / double(l.tokens);
        EXPECT_NEAR(m.blocks[size_t((b * 32 + i) * 32 + j)], want, 1e-5 * (std::fabs(want) + 1.0));
      }
    }
  }
  EXPECT_THROW(calib::block_moments(l.x.data(), l.tokens, l.cols, 64, pool), Error);
}

// What AWQ gathers of an input slice by slice: the channel statistics as plain loops over every
// token give them, the sampled tokens at their global indices, the block moments as
// block_moments's; and the same bits however the tokens are split between calls (the block
// products are cut into 4096-token slices of the stream, not of the calls).
TEST(Awq, InputStatisticsDoNotDependOnTheCalls) {
  const test::CalibLayer l = test::make_calib_layer(23, 1, 96, 5000, {});
  ThreadPool pool(3);
  auto gather = [&](const std::vector<int64_t>& calls) {
    calib::AwqInputAccumulator acc(l.cols, l.tokens, 300, {32, 16}, "blk.0.attn_q.weight");
    int64_t t = 0;
    for (int64_t n : calls) acc.add(l.x.data() + t * l.cols, n, pool), t += n;
    return acc.finish(pool);
  };
  const calib::AwqInputStats once = gather({5000});
  EXPECT_EQ(once.abs_mean, abs_mean(l));
  ASSERT_EQ(once.sample_tokens, 300);
  for (int64_t c = 0; c < l.cols; ++c) {
    double sq = 0.0;
    float mx = 0.0f;
    for (int64_t t = 0; t < l.tokens; ++t) {
      const float v = l.x[size_t(t * l.cols + c)];
      sq += double(v) * double(v), mx = std::max(mx, std::fabs(v));
    }
    EXPECT_EQ(once.sq_mean[size_t(c)], float(sq / double(l.tokens))) << c;
    EXPECT_EQ(once.abs_max[size_t(c)], mx) << c;
  }
  for (int64_t i = 0; i < 300; ++i) {
    const int64_t t = i * l.tokens / 300;
    EXPECT_TRUE(std::equal(l.x.begin() + t * l.cols, l.x.begin() + (t + 1) * l.cols,
                           once.sample.begin() + i * l.cols)) << i;
  }
  EXPECT_EQ(once.moments.at(32).blocks, calib::block_moments(l.x.data(), l.tokens, l.cols, 32, pool).blocks);

  for (const std::vector<int64_t>& calls : {std::vector<int64_t>{1, 4500, 499}, {17, 17, 4000, 966}}) {
    const calib::AwqInputStats split = gather(calls);
    EXPECT_EQ(split.abs_mean, once.abs_mean);
    EXPECT_EQ(split.sq_mean, once.sq_mean);
    EXPECT_EQ(split.abs_max, once.abs_max);
    EXPECT_EQ(split.sample, once.sample);
    EXPECT_EQ(split.moments.at(32).blocks, once.moments.at(32).blocks);
    EXPECT_EQ(split.moments.at(16).blocks, once.moments.at(16).blocks);
  }

  // Fewer or more tokens than announced, and a group that does not divide the columns, are errors.
  calib::AwqInputAccumulator short_of(l.cols, l.tokens, 10, {}, "blk.0.attn_q.weight");
  short_of.add(l.x.data(), 4999, pool);
  EXPECT_THROW(short_of.finish(pool), Error);
  calib::AwqInputAccumulator past(l.cols, 10, 10, {}, "blk.0.attn_q.weight");
  EXPECT_THROW(past.add(l.x.data(), 11, pool), Error);
  EXPECT_THROW(calib::AwqInputAccumulator(l.cols, 10, 10, {64}, "x"), Error);
}

TEST(Awq, ClipsOnlyFormatsThatQuantizeEachGroupAlone) {
  EXPECT_TRUE(calib::awq_can_clip(DType::INT4_ASYM_G128));
  EXPECT_TRUE(calib::awq_can_clip(DType::Q4_0));
  EXPECT_FALSE(calib::awq_can_clip(DType::Q4_K));   // d and dmin shared by 8 groups
  EXPECT_FALSE(calib::awq_can_clip(DType::INT8_PC));  // one scale per row
  EXPECT_FALSE(calib::awq_can_clip(DType::F16));
}

TEST(Awq, RejectsMismatchedHeadTying) {
  test::CalibLayer l = test::make_calib_layer(5, 4, 64, 16, {});
  ThreadPool pool(1);
  const std::vector<float> mean = abs_mean(l);
  const calib::AwqLinear linear{DType::INT4_ASYM_G32, l.w.data(), 4};
  const calib::AwqInput input{64, l.x.data(), 16, mean, {}, {}};
  // 3 query heads cannot share 2 kv heads; 4 x 8 channels are not 64.
  EXPECT_THROW(calib::awq_search_scales({&linear, 1}, input, {3, 2, 8}, {}, pool), Error);
  EXPECT_THROW(calib::awq_search_scales({&linear, 1}, input, {4, 2, 8}, {}, pool), Error);
  EXPECT_NO_THROW(calib::awq_search_scales({&linear, 1}, input, {8, 2, 8}, {}, pool));
}

// SmoothQuant's scales, written out again from the paper's formula: s_c = max|x_c|^a / max|w_c|^(1-a)
// with max|w_c| over both layers' rows, the query heads of a kv head averaged (4 heads of 8 on 2 kv
// heads here), 1 for an all-zero channel.
TEST(SmoothQuant, ScalesFollowThePaperAndTieHeads) {
  test::CalibLayer a = test::make_calib_layer(7, 6, 32, 16, {}), b = test::make_calib_layer(8, 5, 32, 16, {});
  for (int64_t r = 0; r < 6; ++r) a.w[size_t(r * 32 + 3)] = 0.0f;  // channel 3: zero in both layers
  for (int64_t r = 0; r < 5; ++r) b.w[size_t(r * 32 + 3)] = 0.0f;
  std::vector<float> x_max(32);
  for (int64_t c = 0; c < 32; ++c) x_max[size_t(c)] = 0.1f + 0.37f * float(c % 7) + (c == 9 ? 40.0f : 0.0f);
  const calib::AwqLinear linears[] = {{DType::W8A8, a.w.data(), 6}, {DType::W8A8, b.w.data(), 5}};
  for (double alpha : {0.0, 0.5, 0.85}) {
    for (bool tied : {false, true}) {
      const calib::AwqTying tying = tied ? calib::AwqTying{4, 2, 8} : calib::AwqTying{};
      const std::vector<float> s = calib::smoothquant_scales(linears, x_max, tying, alpha);
      ASSERT_EQ(s.size(), 32u);
      std::vector<double> w_max(32, 0.0);
      for (int64_t c = 0; c < 32; ++c) {
        for (int64_t r = 0; r < 6; ++r) w_max[size_t(c)] = std::max(w_max[size_t(c)], double(std::fabs(a.w[size_t(r * 32 + c)])));
        for (int64_t r = 0; r < 5; ++r) w_max[size_t(c)] = std::max(w_max[size_t(c)], double(std::fabs(b.w[size_t(r * 32 + c)])));
      }
      for (int64_t c = 0; c < 32; ++c) {
        double xm = x_max[size_t(c)], wm = w_max[size_t(c)];
        if (tied) {  // channel c = h * 8 + d; heads 2j, 2j + 1 share kv head j
          const int64_t j = (c / 8) / 2, d = c % 8;
          xm = (x_max[size_t(16 * j + d)] + x_max[size_t(16 * j + 8 + d)]) / 2.0;
          wm = (w_max[size_t(16 * j + d)] + w_max[size_t(16 * j + 8 + d)]) / 2.0;
        }
        const double expected = wm == 0.0 ? 1.0 : std::pow(xm, alpha) / std::pow(wm, 1.0 - alpha);
        EXPECT_NEAR(s[size_t(c)], expected, 1e-6 * expected) << "alpha " << alpha << " tied " << tied << " c " << c;
      }
    }
  }
  EXPECT_THROW(calib::smoothquant_scales(linears, x_max, {}, 1.5), Error);
}

// The strength search: its loss is the W8A8 output error written out here in plain loops (x / s
// rounded per token to int8 by amax / 127, W diag(s) per row likewise), the lowest of every
// candidate's, and with a 60x outlier channel smoothing must win clearly over s = 1.
TEST(SmoothQuant, SearchPicksTheLowestW8A8OutputError) {
  test::CalibLayer l = test::make_calib_layer(21, 24, 64, 48, {});
  for (int64_t t = 0; t < 48; ++t) l.x[size_t(t * 64 + 9)] *= 60.0f;
  std::vector<float> x_max(64, 0.0f);
  for (int64_t t = 0; t < 48; ++t) {
    for (int64_t c = 0; c < 64; ++c) x_max[size_t(c)] = std::max(x_max[size_t(c)], std::fabs(l.x[size_t(t * 64 + c)]));
  }
  const calib::AwqLinear linear{DType::W8A8, l.w.data(), 24};
  const std::vector<float> mean = abs_mean(l);
  const calib::AwqInput input{64, l.x.data(), 48, mean, {}, x_max};
  const auto round_row = [](std::vector<double> v) {  // per-row int8, amax / 127
    double amax = 0.0;
    for (double e : v) amax = std::max(amax, std::fabs(e));
    for (double& e : v) e = amax == 0.0 ? 0.0 : std::nearbyint(e / (amax / 127.0)) * (amax / 127.0);
    return v;
  };
  const auto w8a8_error = [&](const std::vector<float>& s) {
    double error = 0.0;
    std::vector<std::vector<double>> wq;
    for (int64_t r = 0; r < 24; ++r) {
      std::vector<double> row(64);
      for (int64_t c = 0; c < 64; ++c) row[size_t(c)] = double(l.w[size_t(r * 64 + c)]) * s[size_t(c)];
      wq.push_back(round_row(row));
    }
    for (int64_t t = 0; t < 48; ++t) {
      std::vector<double> xs(64);
      for (int64_t c = 0; c < 64; ++c) xs[size_t(c)] = double(l.x[size_t(t * 64 + c)]) / s[size_t(c)];
      const std::vector<double> xq = round_row(xs);
      for (int64_t r = 0; r < 24; ++r) {
        double got = 0.0, want = 0.0;
        for (int64_t c = 0; c < 64; ++c) {
          got += xq[size_t(c)] * wq[size_t(r)][size_t(c)];
          want += double(l.x[size_t(t * 64 + c)]) * double(l.w[size_t(r * 64 + c)]);
        }
        error += (got - want) * (got - want);
      }
    }
    return error;
  };
  ThreadPool pool(2);
  const std::vector<double> alphas{0.2, 0.5, 0.8};
  const calib::AwqScaleResult r = calib::smoothquant_search({&linear, 1}, input, {}, alphas, pool);
  ASSERT_GE(r.grid, 0);
  EXPECT_NEAR(r.loss_unscaled, w8a8_error(std::vector<float>(64, 1.0f)), 1e-3 * r.loss_unscaled);
  EXPECT_NEAR(r.loss, w8a8_error(r.scales), 1e-3 * r.loss);
  for (double alpha : alphas) {
    EXPECT_LE(r.loss, w8a8_error(calib::smoothquant_scales({&linear, 1}, x_max, {}, alpha)) * (1 + 1e-3)) << alpha;
  }
  EXPECT_LT(r.loss, 0.8 * r.loss_unscaled);
}

}  // namespace
}  // namespace kestrel
