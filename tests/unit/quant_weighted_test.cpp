// Importance-weighted quantizers (Q4_K, Q5_K, Q6_K, Q5_0; llama-quantize --imatrix) and the imatrix's
// model check. The weighted quantizer must beat the unweighted one on the error it is asked to
// minimise, sum_i importance_i (x_i - q_i)^2, on random rows whose channels differ in importance
// as real imatrices do, and must not be worse than it on plain error when every channel matters
// alike. An imatrix made for another model is a clear error before any work.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "convert/imatrix_file.h"
#include "core/error.h"
#include "loader/gguf_reader.h"
#include "quant/format.h"
#include "test_paths.h"

namespace kestrel {
namespace {

struct Errors {
  double weighted = 0.0, plain = 0.0;
};

// Weighted and plain squared error of a row quantized with `importance` (null: unweighted).
Errors errors(const quant::WeightFormat& f, const std::vector<float>& x, const std::vector<float>& importance,
              bool use_importance) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> bytes(static_cast<size_t>(quant::row_bytes(f, n)));
  if (use_importance) {
    f.quantize_row_weighted(x.data(), bytes.data(), n, importance.data());
  } else {
    f.quantize_row(x.data(), bytes.data(), n);
  }
  std::vector<float> y(x.size());
  f.dequantize_row(bytes.data(), y.data(), n);
  Errors e;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = double(x[i]) - double(y[i]);
    e.weighted += double(importance[i]) * d * d;
    e.plain += d * d;
  }
  return e;
}

TEST(WeightedQuantizers, BeatUnweightedOnTheImportanceWeightedError) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  std::lognormal_distribution<float> spread(0.0f, 1.5f);  // a few channels far more important
  for (DType type : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q5_0}) {
    const quant::WeightFormat& f = quant::require_format(type);
    ASSERT_NE(f.quantize_row_weighted, nullptr) << dtype_name(type);
    const int64_t n = 3 * 256;  // three super-blocks
    std::vector<float> importance(static_cast<size_t>(n));
    for (float& v : importance) v = spread(rng);
    Errors weighted, unweighted;
    for (int row = 0; row < 40; ++row) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = normal(rng) * 0.02f;
      x[size_t(row * 7 % n)] = 0.3f;  // an outlier now and then
      const Errors w = errors(f, x, importance, true), u = errors(f, x, importance, false);
      weighted.weighted += w.weighted, weighted.plain += w.plain;
      unweighted.weighted += u.weighted, unweighted.plain += u.plain;
    }
    EXPECT_LT(weighted.weighted, 0.9 * unweighted.weighted) << dtype_name(type);
    // The price is paid on the channels that matter little: plain error goes up.
    EXPECT_GT(weighted.plain, unweighted.plain) << dtype_name(type);
  }
}

TEST(WeightedQuantizers, UniformImportanceLosesNothingOnPlainError) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (DType type : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q5_0}) {
    const quant::WeightFormat& f = quant::require_format(type);
    const int64_t n = 5 * 256;
    const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
    double weighted = 0.0, unweighted = 0.0;
    for (int row = 0; row < 20; ++row) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = normal(rng);
      weighted += errors(f, x, ones, true).plain;
      unweighted += errors(f, x, ones, false).plain;
    }
    // llama.cpp's weights with uniform importance are sqrt(sigma^2 + x^2): a mild tilt toward
    // large values, so plain error may differ a little, never by much.
    EXPECT_LT(weighted, 1.05 * unweighted) << dtype_name(type);
  }
}

TEST(ImatrixCheck, AnImatrixForAnotherModelIsAClearError) {
  const auto model = gguf::GgufFile::open(test::shared_model_path("stories260K.gguf"));
  ImportanceMatrix good;
  good.entries["blk.0.attn_q.weight"] = {std::vector<double>(64, 1.0), {10}};
  EXPECT_NO_THROW(fit_imatrix(good, *model, "good.gguf"));
  auto message = [&](const ImportanceMatrix& m) {
    try {
      fit_imatrix(m, *model, "other.gguf");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ImportanceMatrix wrong_size;
  wrong_size.entries["blk.0.attn_q.weight"] = {std::vector<double>(896, 1.0), {10}};
  EXPECT_NE(message(wrong_size).find("'blk.0.attn_q.weight' has 896 values per matrix, but"), std::string::npos)
      << message(wrong_size);
  EXPECT_NE(message(wrong_size).find("rows of 64: an imatrix made for another model?"), std::string::npos);
  ImportanceMatrix wrong_name;
  wrong_name.entries["blk.30.ffn_down.weight"] = {std::vector<double>(64, 1.0), {10}};
  EXPECT_NE(message(wrong_name).find("imatrix entry 'blk.30.ffn_down.weight' is not a tensor of"), std::string::npos)
      << message(wrong_name);
}

// gamma^2 of `norm` (F32), floored at 1e-3 of its mean, and that mean.
std::vector<double> gamma_squared(const gguf::TensorInfo& norm, double* mean) {
  const float* gamma = static_cast<const float*>(static_cast<const void*>(norm.data));
  *mean = 0.0;
  for (int64_t c = 0; c < norm.num_elements; ++c) *mean += double(gamma[c]) * gamma[c];
  *mean /= double(norm.num_elements);
  std::vector<double> g2;
  for (int64_t c = 0; c < norm.num_elements; ++c) g2.push_back(std::max(double(gamma[c]) * gamma[c], 1e-3 * *mean));
  return g2;
}

// The token embedding's importance, which no imatrix measures: its first norm's gamma^2 (read here
// straight from the file), not replacing an entry the imatrix has for an untied model.
TEST(ImatrixCheck, TheTokenEmbeddingIsWeightedByItsFirstNormSquared) {
  const auto model = gguf::GgufFile::open(test::shared_model_path("stories260K.gguf"));
  ASSERT_NE(model->find_tensor("output.weight"), nullptr);  // untied
  const gguf::TensorInfo* norm = model->find_tensor("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  ASSERT_EQ(norm->type, DType::F32);
  double mean = 0.0;
  const std::vector<double> expected = gamma_squared(*norm, &mean);

  ImportanceMatrix m;
  m.entries["blk.0.attn_q.weight"] = {std::vector<double>(64, 1.0), {10}};
  EXPECT_NE(std::string(add_token_embedding_importance(m, *model)).find("blk.0.attn_norm.weight^2"), std::string::npos);
  ASSERT_TRUE(m.entries.contains("token_embd.weight"));
  EXPECT_TRUE(m.derived.contains("token_embd.weight"));
  const ImatrixEntry& e = m.entries.at("token_embd.weight");
  ASSERT_EQ(e.n_in(), 64);
  const std::vector<float> importance = e.mean();
  int distinct = 0;
  for (int64_t c = 0; c < 64; ++c) {
    EXPECT_NEAR(importance[size_t(c)], expected[size_t(c)], 1e-6 * expected[size_t(c)]) << "channel " << c;
    distinct += std::fabs(importance[size_t(c)] - importance[0]) > 1e-3 * mean;
  }
  EXPECT_GT(distinct, 32);  // a real norm's gammas differ: the weights are not uniform
  EXPECT_NO_THROW(fit_imatrix(m, *model, "with-embedding"));

  // An entry the imatrix has for an untied model's embedding stays.
  ImportanceMatrix given;
  given.entries["token_embd.weight"] = {std::vector<double>(64, 2.0), {1}};
  EXPECT_EQ(add_token_embedding_importance(given, *model), "");
  EXPECT_EQ(given.entries.at("token_embd.weight").sum2, std::vector<double>(64, 2.0));
  EXPECT_FALSE(given.derived.contains("token_embd.weight"));
}

// A head tied to the embedding (SmolLM3's fixture has no output.weight): `kestrel imatrix` records
// the head's input under the embedding's name, and the two roles are summed, each scaled to mean 1:
// head_c / mean(head) + gamma_c^2 / mean(gamma^2).
TEST(ImatrixCheck, ATiedEmbeddingSumsTheHeadsAndTheLookupsImportance) {
  const auto model = gguf::GgufFile::open(test::test_data_path("arch/smollm3/model.gguf"));
  ASSERT_EQ(model->find_tensor("output.weight"), nullptr);
  const gguf::TensorInfo* norm = model->find_tensor("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  ASSERT_EQ(norm->type, DType::F32);
  const int64_t n = norm->num_elements;
  double mean = 0.0;
  const std::vector<double> g2 = gamma_squared(*norm, &mean);
  double g2_mean = 0.0;
  for (double v : g2) g2_mean += v / double(n);

  ImportanceMatrix m;
  ImatrixEntry head;
  for (int64_t c = 0; c < n; ++c) head.sum2.push_back(3.0 * double(1 + c % 7));  // means (1 + c % 7) over 3 tokens
  head.counts = {3};
  double head_mean = 0.0;
  for (int64_t c = 0; c < n; ++c) head_mean += double(1 + c % 7) / double(n);
  m.entries["token_embd.weight"] = head;
  const ImportanceMatrix fitted = fit_imatrix(m, *model, "tied");
  EXPECT_NE(std::string(fitted.derived.at("token_embd.weight")).find("tied output head"), std::string::npos);
  const std::vector<float> importance = fitted.entries.at("token_embd.weight").mean();
  ASSERT_EQ(int64_t(importance.size()), n);
  for (int64_t c = 0; c < n; ++c) {
    const double expected = double(1 + c % 7) / head_mean + g2[size_t(c)] / g2_mean;
    EXPECT_NEAR(importance[size_t(c)], expected, 1e-5 * expected) << "channel " << c;
  }
  // Without the head's entry (llama-imatrix's file): gamma^2 alone.
  const ImportanceMatrix lookup_only = fit_imatrix(ImportanceMatrix{}, *model, "none");
  EXPECT_NE(std::string(lookup_only.derived.at("token_embd.weight")).find("no imatrix entry"), std::string::npos);
  EXPECT_NEAR(lookup_only.entries.at("token_embd.weight").mean()[0], g2[0], 1e-6 * g2[0]);
}

}  // namespace
}  // namespace kestrel
