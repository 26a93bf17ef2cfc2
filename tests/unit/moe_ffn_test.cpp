// The Mixture-of-Experts block (model/moe_ffn.h) against a plain scalar reference written here: a
// dense loop over every expert, each weighted by its routing weight (0 for experts a token did not
// choose), in double precision over the weights as stored (dequantized). Also: routing's softmax,
// top-k, tie-breaking and normalization by hand; a token's output bitwise the same alone and in a
// batch; experts nobody chose are never read (their weights poisoned with NaN change nothing).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "model/moe_ffn.h"
#include "quant/format.h"

namespace kestrel {
namespace {

// Random matrices encoded in one type, kept with their dequantized values for the reference.
struct Matrix {
  DType type = DType::F32;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows][cols] as the format stores them

  WeightView view() const { return WeightView{type, rows, cols, bytes.data()}; }
};

Matrix random_matrix(DType type, int64_t rows, int64_t cols, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  const quant::WeightFormat& format = quant::require_format(type);
  Matrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  const int64_t row_bytes = quant::row_bytes(format, cols);
  m.bytes.resize(size_t(rows * row_bytes));
  m.values.resize(size_t(rows * cols));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = normal(rng);
    format.quantize_row(row.data(), m.bytes.data() + r * row_bytes, cols);
    format.dequantize_row(m.bytes.data() + r * row_bytes, m.values.data() + r * cols, cols);
  }
  return m;
}

struct Shape {
  int64_t n_embd, n_ff, n_expert, k, n_shared;  // n_shared 0: no shared expert
  bool normalize;
};

struct MoeLayer {
  MoeConfig config;
  Matrix router, gate, up, down;                      // stacks: [n_expert * rows][cols]
  Matrix shared_gate, shared_up, shared_down, shared_gate_inp;
  MoeLayerWeights weights;
};

MoeLayer make_layer(const Shape& s, DType type, uint32_t seed) {
  std::mt19937 rng(seed);
  MoeLayer l;
  l.config.n_expert = s.n_expert;
  l.config.n_expert_used = s.k;
  l.config.n_ff_expert = s.n_ff;
  l.config.n_ff_shared = s.n_shared;
  l.config.normalize_top_k = s.normalize;
  // The router stays F32, as llama.cpp's quantizer leaves ffn_gate_inp.
  l.router = random_matrix(DType::F32, s.n_expert, s.n_embd, rng, 0.5f);
  l.gate = random_matrix(type, s.n_expert * s.n_ff, s.n_embd, rng, 0.2f);
  l.up = random_matrix(type, s.n_expert * s.n_ff, s.n_embd, rng, 0.2f);
  l.down = random_matrix(type, s.n_expert * s.n_embd, s.n_ff, rng, 0.2f);
  MoeLayerWeights& w = l.weights;
  w.n_expert = s.n_expert;
  w.n_ff_expert = s.n_ff;
  w.n_embd = s.n_embd;
  w.n_out = s.n_embd;
  w.router = l.router.view();
  w.gate_stack = l.gate.view();
  w.up_stack = l.up.view();
  w.down_stack = l.down.view();
  if (s.n_shared > 0) {
    l.shared_gate = random_matrix(type, s.n_shared, s.n_embd, rng, 0.2f);
    l.shared_up = random_matrix(type, s.n_shared, s.n_embd, rng, 0.2f);
    l.shared_down = random_matrix(type, s.n_embd, s.n_shared, rng, 0.2f);
    l.shared_gate_inp = random_matrix(DType::F32, 1, s.n_embd, rng, 0.3f);
    w.shared_gate = l.shared_gate.view();
    w.shared_up = l.shared_up.view();
    w.shared_down = l.shared_down.view();
    w.shared_gate_inp = l.shared_gate_inp.view();
  }
  return l;
}

std::vector<float> random_input(int64_t T, int64_t n_embd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(T * n_embd));
  for (float& v : x) v = normal(rng);
  return x;
}

double dot(const float* a, const float* b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(a[i]) * double(b[i]);
  return sum;
}

// down(silu(gate x) * up x) of one gated MLP given as row-major [ff][embd], [ff][embd], [embd][ff].
std::vector<double> reference_mlp(const float* gate, const float* up, const float* down, const float* x,
                                  int64_t n_embd, int64_t n_ff) {
  std::vector<float> h(static_cast<size_t>(n_ff));
  for (int64_t f = 0; f < n_ff; ++f) {
    const double g = dot(gate + f * n_embd, x, n_embd), u = dot(up + f * n_embd, x, n_embd);
    h[size_t(f)] = float(g / (1.0 + std::exp(-g)) * u);
  }
  std::vector<double> y(static_cast<size_t>(n_embd));
  for (int64_t i = 0; i < n_embd; ++i) y[size_t(i)] = dot(down + i * n_ff, h.data(), n_ff);
  return y;
}

// The block by definition: routing weights of all experts (0 where not chosen), every expert run.
std::vector<double> reference_moe(const MoeLayer& l, const float* x, int64_t T) {
  const MoeConfig& m = l.config;
  const int64_t n_embd = l.router.cols, n_ff = m.n_ff_expert;
  std::vector<double> out(size_t(T * n_embd), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * n_embd;
    std::vector<double> p(size_t(m.n_expert));
    double max = -INFINITY, sum = 0.0;
    for (int64_t e = 0; e < m.n_expert; ++e) {
      p[size_t(e)] = dot(l.router.values.data() + e * n_embd, xt, n_embd);
      max = std::max(max, p[size_t(e)]);
    }
    for (double& v : p) sum += (v = std::exp(v - max));
    for (double& v : p) v /= sum;
    std::vector<int64_t> order(size_t(m.n_expert));
    for (int64_t e = 0; e < m.n_expert; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
    std::vector<double> weight(size_t(m.n_expert), 0.0);
    double chosen_sum = 0.0;
    for (int64_t j = 0; j < m.n_expert_used; ++j) chosen_sum += p[size_t(order[size_t(j)])];
    for (int64_t j = 0; j < m.n_expert_used; ++j) {
      const int64_t e = order[size_t(j)];
      weight[size_t(e)] = m.normalize_top_k ? p[size_t(e)] / chosen_sum : p[size_t(e)];
    }
    for (int64_t e = 0; e < m.n_expert; ++e) {
      const std::vector<double> y =
          reference_mlp(l.gate.values.data() + e * n_ff * n_embd, l.up.values.data() + e * n_ff * n_embd,
                        l.down.values.data() + e * n_embd * n_ff, xt, n_embd, n_ff);
      for (int64_t i = 0; i < n_embd; ++i) out[size_t(t * n_embd + i)] += weight[size_t(e)] * y[size_t(i)];
    }
    if (m.n_ff_shared > 0) {
      const std::vector<double> y = reference_mlp(l.shared_gate.values.data(), l.shared_up.values.data(),
                                                  l.shared_down.values.data(), xt, n_embd, m.n_ff_shared);
      const double g = 1.0 / (1.0 + std::exp(-dot(l.shared_gate_inp.values.data(), xt, n_embd)));
      for (int64_t i = 0; i < n_embd; ++i) out[size_t(t * n_embd + i)] += g * y[size_t(i)];
    }
  }
  return out;
}

std::vector<float> run_moe(Backend& backend, const MoeLayer& l, const std::vector<float>& x, int64_t T,
                           const MoeLayerWeights* weights = nullptr) {
  MoeScratch scratch;
  std::vector<float> out(size_t(T * l.weights.n_embd), -1.0f);
  moe_ffn(backend, l.config, weights ? *weights : l.weights, GatedActivation::Silu, x.data(), T, scratch,
          out.data());
  return out;
}

// Max |got - want| over the block, against `tolerance` times the largest |want| (plus a floor).
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0.0, worst = 0.0;
  size_t worst_at = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(double(got[i]) - want[i]);
    if (!(error <= worst)) {
      worst = error;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, tolerance * scale + 1e-6)
      << "at " << worst_at << ": got " << got[worst_at] << ", want " << want[worst_at] << " (scale " << scale << ")";
}

TEST(MoeRouting, SoftmaxTopKNormalizedWithTiesToTheLowerIndex) {
  MoeConfig m;
  m.n_expert = 5;
  m.n_expert_used = 2;
  // Token 0: experts 3 and 1 lead. Token 1: experts 1, 2 and 4 tie; the lower indices win.
  const float logits[] = {0.0f, 2.0f, -1.0f, 3.0f, 0.5f,
                          0.0f, 1.0f, 1.0f, 0.0f, 1.0f};
  MoeRouting r;
  route_tokens(logits, 2, m, r);
  ASSERT_EQ(r.experts, (std::vector<int32_t>{3, 1, 1, 2}));
  const double e3 = std::exp(3.0), e1 = std::exp(2.0);
  EXPECT_NEAR(r.weights[0], e3 / (e3 + e1), 1e-6);
  EXPECT_NEAR(r.weights[1], e1 / (e3 + e1), 1e-6);
  EXPECT_FLOAT_EQ(r.weights[2], 0.5f);
  EXPECT_FLOAT_EQ(r.weights[3], 0.5f);

  // Without renormalization (Qwen2-MoE) the weights are the softmax probabilities themselves.
  m.normalize_top_k = false;
  route_tokens(logits, 1, m, r);
  double sum = 0.0;
  for (int e = 0; e < 5; ++e) sum += std::exp(double(logits[e]) - 3.0);
  EXPECT_NEAR(r.weights[0], 1.0 / sum, 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(-1.0) / sum, 1e-6);

  // A weights scale multiplies after normalization.
  m.normalize_top_k = true;
  m.weights_scale = 2.5f;
  route_tokens(logits, 1, m, r);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 2.5, 1e-5);
}

// Eight experts in four groups of two, scores chosen so that each rule picks differently:
//   expert       0     1     2     3     4     5     6     7
//   score      .95   .10   .80   .70   .85   .05   .50   .58
//   bias         0     0     0     0     0     0  +.10  -.03   (selection: .60 and .55 for 6 and 7)
// Groups by their two best selection scores (DeepSeek-V3): {2,3} 1.50, {6,7} 1.15, {0,1} 1.05,
// {4,5} 0.90 -> the best two groups hold 2, 3, 6, 7, and the top 3 of those by selection are 2, 3, 6
// (6 over 7 only through the bias); weights are the unbiased scores .8, .7, .5 renormalized.
// Groups by their best score (DeepSeek-V2): {0,1} .95, {4,5} .85 -> experts 0, 4, 1.
constexpr float kGroupScores[8] = {0.95f, 0.10f, 0.80f, 0.70f, 0.85f, 0.05f, 0.50f, 0.58f};

MoeConfig grouped_config(MoeConfig::Gating gating, MoeConfig::GroupScore score) {
  MoeConfig m;
  m.n_expert = 8;
  m.n_expert_used = 3;
  m.n_group = 4;
  m.n_group_used = 2;
  m.gating = gating;
  m.group_score = score;
  return m;
}

TEST(MoeRouting, SigmoidScoresWithSelectionBiasAndGroupsByTheirBestTwo) {
  MoeConfig m = grouped_config(MoeConfig::Gating::Sigmoid, MoeConfig::GroupScore::TopTwoSum);
  m.normalize_top_k = true;
  m.weights_scale = 2.5f;
  float logits[8];
  for (int e = 0; e < 8; ++e) logits[e] = std::log(kGroupScores[e] / (1.0f - kGroupScores[e]));
  const float bias[8] = {0, 0, 0, 0, 0, 0, 0.10f, -0.03f};
  MoeRouting r;
  route_tokens(logits, 1, m, r, bias);
  ASSERT_EQ(r.experts, (std::vector<int32_t>{2, 3, 6}));
  EXPECT_NEAR(r.weights[0], 2.5 * 0.8 / 2.0, 1e-5);
  EXPECT_NEAR(r.weights[1], 2.5 * 0.7 / 2.0, 1e-5);
  EXPECT_NEAR(r.weights[2], 2.5 * 0.5 / 2.0, 1e-5);
  // Without the bias expert 7 (.58) beats 6 (.50).
  route_tokens(logits, 1, m, r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 3, 7}));
  // Every group used: the plain top 3 by selection, 0, 4, 2.
  m.n_group_used = 4;
  route_tokens(logits, 1, m, r, bias);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 4, 2}));
}

TEST(MoeRouting, SoftmaxGroupsRankedByTheirBestExpert) {
  MoeConfig m = grouped_config(MoeConfig::Gating::Softmax, MoeConfig::GroupScore::Max);
  m.normalize_top_k = false;  // DeepSeek-V2
  float logits[8];
  double sum = 0.0;
  for (int e = 0; e < 8; ++e) {
    logits[e] = std::log(kGroupScores[e]);  // softmax: the scores over their sum, 4.53
    sum += kGroupScores[e];
  }
  MoeRouting r;
  route_tokens(logits, 1, m, r);
  ASSERT_EQ(r.experts, (std::vector<int32_t>{0, 4, 1}));
  EXPECT_NEAR(r.weights[0], 0.95 / sum, 1e-6) << "not renormalized";
  EXPECT_NEAR(r.weights[2], 0.10 / sum, 1e-6);
  // The same scores ranked by each group's best two choose groups {2,3} and {6,7}.
  route_tokens(logits, 1, grouped_config(MoeConfig::Gating::Softmax, MoeConfig::GroupScore::TopTwoSum), r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 3, 7}));
}

// A NaN score (a NaN router row, or selection bias) loses to every number, wherever it sits: first
// in the list, or in the first group.
TEST(MoeRouting, ANaNScoreNeverBeatsANumber) {
  MoeConfig m = grouped_config(MoeConfig::Gating::Sigmoid, MoeConfig::GroupScore::TopTwoSum);
  float logits[8];
  for (int e = 0; e < 8; ++e) logits[e] = std::log(kGroupScores[e] / (1.0f - kGroupScores[e]));
  logits[0] = NAN;
  MoeRouting r;
  route_tokens(logits, 1, m, r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 3, 7})) << "group {0,1} scores NaN + .10: not chosen";
  m.n_group_used = 4;
  route_tokens(logits, 1, m, r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{4, 2, 3}));
}

TEST(MoeRouting, NaNLogitsStillChooseDistinctExperts) {
  MoeConfig m;
  m.n_expert = 4;
  m.n_expert_used = 3;
  const float logits[] = {NAN, NAN, NAN, NAN};
  MoeRouting r;
  route_tokens(logits, 1, m, r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, 2}));
}

struct Case {
  const char* name;
  Shape shape;
  DType type;
  double tolerance;  // relative to the block's largest output
};

// F32 checks the math; the quantized types check expert views at offsets inside quantized
// stacks (rows of blocks), where activation quantization costs about a percent.
const Case kCases[] = {
    {"f32_mixtral_like", {48, 40, 5, 2, 0, true}, DType::F32, 1e-5},
    {"f32_qwen2moe_like", {48, 24, 7, 3, 56, false}, DType::F32, 1e-5},
    {"q8_0_qwen3moe_like", {96, 64, 6, 4, 0, true}, DType::Q8_0, 2e-2},
    {"q4_k_shared", {256, 256, 3, 2, 256, false}, DType::Q4_K, 3e-2},
};

TEST(MoeFfn, MatchesDenseReferenceOverAllExperts) {
  auto backend = make_cpu_backend(2);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const MoeLayer l = make_layer(c.shape, c.type, 7);
    for (int64_t T : {1, 2, 7, 33}) {
      SCOPED_TRACE(T);
      const std::vector<float> x = random_input(T, c.shape.n_embd, uint32_t(100 + T));
      expect_close(run_moe(*backend, l, x, T), reference_moe(l, x.data(), T), c.tolerance);
    }
  }
}

TEST(MoeFfn, TokenOutputIsBitwiseTheSameAloneAndInABatch) {
  auto two = make_cpu_backend(2);
  auto one = make_cpu_backend(1);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const MoeLayer l = make_layer(c.shape, c.type, 11);
    const int64_t T = 19, n_embd = c.shape.n_embd;
    const std::vector<float> x = random_input(T, n_embd, 5);
    const std::vector<float> batch = run_moe(*two, l, x, T);
    EXPECT_EQ(batch, run_moe(*one, l, x, T)) << "thread count changed the result";
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<float> xt(x.begin() + t * n_embd, x.begin() + (t + 1) * n_embd);
      const std::vector<float> alone = run_moe(*two, l, xt, 1);
      ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + t * n_embd, size_t(n_embd) * sizeof(float)))
          << "token " << t << " differs alone and in the batch";
    }
  }
}

// The grouped calls the block uses are, group by group, bitwise the plain calls.
TEST(MoeFfn, GroupedCallsEqualThePlainCallsPerGroup) {
  auto backend = make_cpu_backend(2);
  std::mt19937 rng(5);
  for (DType type : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(type));
    const int64_t cols = 256;
    std::vector<Matrix> gates, ups;
    std::vector<std::vector<float>> xs;
    const int64_t rows[] = {96, 200, 48, 130};
    const int64_t ns[] = {1, 5, 0, 17};
    for (int i = 0; i < 4; ++i) {
      gates.push_back(random_matrix(type, rows[i], cols, rng, 0.2f));
      ups.push_back(random_matrix(type, rows[i], cols, rng, 0.2f));
      xs.push_back(random_input(ns[i], cols, uint32_t(i)));
    }
    std::vector<std::vector<float>> grouped(4), plain(4), grouped_mm(4), plain_mm(4);
    std::vector<GatedFfnGroup> gated;
    std::vector<MatmulGroup> products;
    for (int i = 0; i < 4; ++i) {
      grouped[size_t(i)].assign(size_t(ns[i] * rows[i]), 0.0f);
      grouped_mm[size_t(i)].assign(size_t(ns[i] * rows[i]), 0.0f);
      gated.push_back({gates[size_t(i)].view(), ups[size_t(i)].view(), xs[size_t(i)].data(), ns[i],
                       grouped[size_t(i)].data()});
      products.push_back({gates[size_t(i)].view(), xs[size_t(i)].data(), ns[i], grouped_mm[size_t(i)].data()});
    }
    backend->gated_ffn_grouped(gated, GatedActivation::Silu);
    backend->matmul_grouped(products);
    for (int i = 0; i < 4; ++i) {
      plain[size_t(i)].assign(size_t(ns[i] * rows[i]), 0.0f);
      plain_mm[size_t(i)].assign(size_t(ns[i] * rows[i]), 0.0f);
      backend->gated_ffn(gates[size_t(i)].view(), ups[size_t(i)].view(), GatedActivation::Silu, xs[size_t(i)].data(),
                         ns[i], plain[size_t(i)].data());
      backend->matmul(gates[size_t(i)].view(), xs[size_t(i)].data(), ns[i], plain_mm[size_t(i)].data());
      EXPECT_EQ(grouped[size_t(i)], plain[size_t(i)]) << "gated group " << i;
      EXPECT_EQ(grouped_mm[size_t(i)], plain_mm[size_t(i)]) << "matmul group " << i;
    }
  }
}

// Experts no token of the step chose are never read: poisoning their weights with NaN changes
// nothing, bit for bit. For one token (decode) that leaves k of n_expert experts read.
TEST(MoeFfn, ReadsOnlyTheChosenExperts) {
  auto backend = make_cpu_backend(2);
  const Shape shape{64, 32, 8, 2, 0, true};
  MoeLayer l = make_layer(shape, DType::F32, 3);
  for (int64_t T : {1, 3}) {
    SCOPED_TRACE(T);
    const std::vector<float> x = random_input(T, shape.n_embd, 9);
    const std::vector<float> clean = run_moe(*backend, l, x, T);
    std::vector<float> logits(size_t(T * shape.n_expert));
    backend->matmul(l.weights.router, x.data(), T, logits.data());
    MoeRouting r;
    route_tokens(logits.data(), T, l.config, r);
    std::vector<bool> used(size_t(shape.n_expert));
    for (int32_t e : r.experts) used[size_t(e)] = true;
    ASSERT_LT(std::count(used.begin(), used.end(), true), shape.n_expert) << "pick inputs that leave experts unused";
    MoeLayer poisoned = l;
    for (int64_t e = 0; e < shape.n_expert; ++e) {
      if (used[size_t(e)]) continue;
      for (Matrix* m : {&poisoned.gate, &poisoned.up, &poisoned.down}) {
        const int64_t rows = m->rows / shape.n_expert;
        std::fill_n(reinterpret_cast<float*>(m->bytes.data()) + e * rows * m->cols, rows * m->cols, NAN);
      }
    }
    MoeLayerWeights w = l.weights;
    w.gate_stack = poisoned.gate.view();
    w.up_stack = poisoned.up.view();
    w.down_stack = poisoned.down.view();
    EXPECT_EQ(clean, run_moe(*backend, l, x, T, &w));
    // And the poison is real: poisoning every expert does reach the output.
    std::fill_n(reinterpret_cast<float*>(poisoned.gate.bytes.data()), poisoned.gate.rows * poisoned.gate.cols, NAN);
    const std::vector<float> all_poisoned = run_moe(*backend, l, x, T, &w);
    EXPECT_TRUE(std::isnan(all_poisoned[0]));
  }
}

}  // namespace
}  // namespace kestrel
