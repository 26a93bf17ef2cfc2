// The CPU backend (backend/backend.h) against naive double-precision references written here:
// matmul for every weight format (including batch and thread-count invariance, bit for bit),
// get_rows, rms_norm, rope, silu_mul, gelu_mul, add; the fused ops (matmul_many, gated_ffn,
// add_rms_norm) bit for bit equal to their parts. kv_write and paged attention: attention_kv_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "quant/format.h"

namespace kestrel {
namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24, unit roundoff of float

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

uint32_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A weight matrix stored in `type`, and its dequantized values (what the kernel really multiplies).
struct Weight {
  DType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;
  WeightView view() const { return {type, rows, cols, bytes.data()}; }
};

Weight make_weight(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const quant::WeightFormat& f = quant::require_format(type);
  const int64_t rb = quant::row_bytes(f, cols);
  Weight w{type, rows, cols, std::vector<uint8_t>(size_t(rows * rb)), std::vector<float>(size_t(rows * cols))};
  const std::vector<float> src = random_floats(rng, size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    f.quantize_row(src.data() + r * cols, w.bytes.data() + r * rb, cols);
    f.dequantize_row(w.bytes.data() + r * rb, w.deq.data() + r * cols, cols);
  }
  return w;
}

// ---------------------------------------------------------------------------------------------
// matmul

struct MatmulCase {
  DType type;
  std::vector<int64_t> cols;
};

TEST(CpuBackendMatmul, MatchesReferenceAndIsBatchAndThreadInvariant) {
  const std::vector<MatmulCase> cases = {
      {DType::F32, {7, 32, 96, 173, 256}}, {DType::F16, {7, 32, 96, 173, 256}},
      {DType::BF16, {7, 32, 96, 173, 256}}, {DType::Q8_0, {32, 96, 256}}, {DType::Q4_0, {32, 96, 256}}};
  constexpr int kMaxBatch = 17;
  auto one = make_cpu_backend(1);
  auto two = make_cpu_backend(2);
  std::mt19937 rng(1);
  for (const MatmulCase& c : cases) {
    const quant::WeightFormat& act = quant::require_format(quant::require_format(c.type).activation_type);
    for (int64_t rows : {1, 5, 67}) {
      for (int64_t cols : c.cols) {
        SCOPED_TRACE(testing::Message() << dtype_name(c.type) << " rows=" << rows << " cols=" << cols);
        const Weight w = make_weight(c.type, rows, cols, rng);
        const std::vector<float> x = random_floats(rng, size_t(kMaxBatch * cols), -3.0f, 3.0f);
        // Each token alone, one thread: the reference for bitwise comparisons.
        std::vector<float> alone(size_t(kMaxBatch * rows));
        for (int t = 0; t < kMaxBatch; ++t) one->matmul(w.view(), x.data() + t * cols, 1, alone.data() + t * rows);
        // Against the scalar definition: activations are converted to the activation type first.
        std::vector<uint8_t> act_bytes(size_t(quant::row_bytes(act, cols)));
        std::vector<float> a(static_cast<size_t>(cols));
        for (int t = 0; t < kMaxBatch; ++t) {
          act.quantize_row(x.data() + t * cols, act_bytes.data(), cols);
          act.dequantize_row(act_bytes.data(), a.data(), cols);
          for (int64_t r = 0; r < rows; ++r) {
            double ref = 0.0, sum_abs = 0.0;
            for (int64_t k = 0; k < cols; ++k) {
              const double p = double(w.deq[size_t(r * cols + k)]) * double(a[size_t(k)]);
              ref += p;
              sum_abs += std::fabs(p);
            }
            // Float accumulation of cols terms, each with <= 2 roundings: (cols + 2) u sum|w a|.
            ASSERT_NEAR(alone[size_t(t * rows + r)], ref, double(cols + 2) * kU * sum_abs + 1e-30)
                << "t=" << t << " r=" << r;
          }
        }
        // Batch and thread invariance: row t of any batch equals the token run alone, bit for bit.
        for (int n = 1; n <= kMaxBatch; ++n) {
          for (Backend* backend : {one.get(), two.get()}) {
            std::vector<float> y(size_t(n * rows), std::numeric_limits<float>::quiet_NaN());
            backend->matmul(w.view(), x.data(), n, y.data());
            ASSERT_TRUE(same_bits(y, std::vector<float>(alone.begin(), alone.begin() + n * rows)))
                << "batch " << n << (backend == one.get() ? " 1 thread" : " 2 threads");
          }
        }
      }
    }
  }
}

TEST(CpuBackendMatmul, RejectsRowLengthNotMultipleOfBlock) {
  auto backend = make_cpu_backend(1);
  std::mt19937 rng(2);
  const Weight w = make_weight(DType::Q8_0, 2, 64, rng);
  WeightView bad = w.view();
  bad.cols = 48;
  std::vector<float> x(48), y(2);
  EXPECT_THROW(backend->matmul(bad, x.data(), 1, y.data()), Error);
  bad.type = DType::Q4_K;
  EXPECT_THROW(backend->matmul(bad, x.data(), 1, y.data()), Error);
}

// ---------------------------------------------------------------------------------------------
// get_rows, rms_norm, silu_mul, add

TEST(CpuBackend, GetRowsDequantizesTheRequestedRows) {
  auto backend = make_cpu_backend(2);
  std::mt19937 rng(3);
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    const int64_t cols = quant::require_format(type).block_size == 1 ? 173 : 96;
    const Weight table = make_weight(type, 11, cols, rng);
    const std::vector<int32_t> ids = {3, 0, 10, 3, 7};
    std::vector<float> out(ids.size() * size_t(cols));
    backend->get_rows(table.view(), ids.data(), int64_t(ids.size()), out.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::vector<float> expected(table.deq.begin() + ids[i] * cols, table.deq.begin() + (ids[i] + 1) * cols);
      // Dequantization is exact arithmetic on the stored values: bitwise equality.
      EXPECT_TRUE(same_bits(std::vector<float>(out.begin() + int64_t(i) * cols, out.begin() + int64_t(i + 1) * cols),
                            expected))
          << dtype_name(type) << " row " << i;
    }
    const int32_t bad[] = {11};
    EXPECT_THROW(backend->get_rows(table.view(), bad, 1, out.data()), Error) << dtype_name(type);
    const int32_t negative[] = {-1};
    EXPECT_THROW(backend->get_rows(table.view(), negative, 1, out.data()), Error) << dtype_name(type);
  }
}

TEST(CpuBackend, RmsNormMatchesFormula) {
  auto backend = make_cpu_backend(1);
  std::mt19937 rng(4);
  for (int64_t width : {1, 7, 64, 4096}) {
    for (float eps : {1e-5f, 1e-6f}) {
      constexpr int64_t n = 5;
      std::vector<float> x = random_floats(rng, size_t(n * width), -4.0f, 4.0f);
      std::fill(x.begin() + 2 * width, x.begin() + 3 * width, 0.0f);  // an all-zero row
      for (int64_t j = 0; j < width; ++j) x[size_t(3 * width + j)] *= 1e-3f;  // small: eps matters
      const std::vector<float> weight = random_floats(rng, size_t(width), 0.5f, 2.0f);
      std::vector<float> out(x.size());
      backend->rms_norm(x.data(), weight.data(), n, width, eps, out.data());
      for (int64_t i = 0; i < n; ++i) {
        double ss = 0.0;
        for (int64_t j = 0; j < width; ++j) ss += double(x[size_t(i * width + j)]) * x[size_t(i * width + j)];
        const double scale = 1.0 / std::sqrt(ss / double(width) + double(eps));
        for (int64_t j = 0; j < width; ++j) {
          const double ref = double(x[size_t(i * width + j)]) * scale * weight[size_t(j)];
          // The scale is rounded to float once and two float products follow: 3 roundings.
          EXPECT_NEAR(out[size_t(i * width + j)], ref, 4.0 * kU * std::fabs(ref) + 1e-37)
              << "width " << width << " row " << i << " j " << j;
        }
      }
    }
  }
}

TEST(CpuBackend, SiluMulAndAdd) {
  auto backend = make_cpu_backend(1);
  std::mt19937 rng(5);
  std::vector<float> gate = random_floats(rng, 1000, -20.0f, 20.0f);
  const std::vector<float> up = random_floats(rng, 1000, -3.0f, 3.0f);
  gate[0] = 0.0f, gate[1] = -100.0f, gate[2] = 100.0f, gate[3] = -88.0f;
  std::vector<float> out(1000);
  backend->silu_mul(gate.data(), up.data(), 1000, out.data());
  for (size_t i = 0; i < 1000; ++i) {
    const double g = gate[i];
    const double ref = g / (1.0 + std::exp(-g)) * up[i];
    // float exp (<= 2 ulp), one add, one divide, one multiply: within 8u relative; the absolute
    // floor covers g << 0, where exp(-g) overflows float and the result flushes to 0 (|ref| < 1e-35).
    EXPECT_NEAR(out[i], ref, 8.0 * kU * std::fabs(ref) + 1e-35) << "gate " << g;
  }
  std::vector<float> x = random_floats(rng, 777, -1e3f, 1e3f);
  const std::vector<float> y = random_floats(rng, 777, -1.0f, 1.0f);
  std::vector<float> expected(777);
  for (size_t i = 0; i < 777; ++i) expected[i] = x[i] + y[i];  // one float add: exact comparison
  backend->add(x.data(), y.data(), 777);
  EXPECT_TRUE(same_bits(x, expected));
}

TEST(CpuBackend, GeluMulMatchesTanhFormula) {
  auto backend = make_cpu_backend(1);
  std::mt19937 rng(6);
  std::vector<float> gate = random_floats(rng, 1001, -12.0f, 12.0f);
  const std::vector<float> up = random_floats(rng, 1001, -3.0f, 3.0f);
  gate[0] = 0.0f, gate[1] = -100.0f, gate[2] = 100.0f, gate[3] = 1e-6f, gate[4] = -1e-6f;
  std::vector<float> out(gate.size());
  backend->gelu_mul(gate.data(), up.data(), int64_t(gate.size()), out.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double z = 2.0 * 0.7978845608028654 * (g + 0.044715 * g * g * g);
    // 0.5 g (1 + tanh(z / 2)) written as g * sigmoid(z): 1 + tanh cancels for z << 0, even in double.
    const double ref = g / (1.0 + std::exp(-z)) * up[i];
    // Computed as g * sigmoid(z): z rounded 4 times (relative 4u; its terms share a sign), which
    // exp's condition number |z| amplifies, exp itself (<= 4 ulp), add, divide, two multiplies.
    EXPECT_NEAR(out[i], ref, (16.0 + 4.0 * std::fabs(z)) * kU * std::fabs(ref) + 1e-35) << "gate " << g;
  }
  // In place, and a tail shorter than a vector gives the same values as inside a vector.
  std::vector<float> in_place(gate.begin(), gate.begin() + 11);
  backend->gelu_mul(in_place.data(), up.data(), 11, in_place.data());
  EXPECT_TRUE(same_bits(in_place, std::vector<float>(out.begin(), out.begin() + 11)));
}

// ---------------------------------------------------------------------------------------------
// Fused ops: each equals the unfused ops it replaces, bit for bit, for 1 and 2 threads.

TEST(CpuBackendFused, MatmulManyEqualsSeparateMatmuls) {
  std::mt19937 rng(21);
  // Q4_K and Q5_K share one activation layout, Q6_K and Q8_0 each have their own; 45 and 7 rows
  // split unevenly between threads.
  const Weight q = make_weight(DType::Q4_K, 64, 512, rng);
  const Weight k = make_weight(DType::Q6_K, 45, 512, rng);
  const Weight v = make_weight(DType::Q5_K, 7, 512, rng);
  const Weight o = make_weight(DType::Q8_0, 33, 512, rng);
  const WeightView views[4] = {q.view(), k.view(), v.view(), o.view()};
  for (int threads : {1, 2}) {
    auto backend = make_cpu_backend(threads);
    for (int64_t n : {1, 3, 17}) {
      const std::vector<float> x = random_floats(rng, size_t(n * 512));
      std::vector<std::vector<float>> fused(4), alone(4);
      float* outs[4];
      for (size_t i = 0; i < 4; ++i) {
        fused[i].assign(size_t(n * views[i].rows), std::numeric_limits<float>::quiet_NaN());
        alone[i].resize(fused[i].size());
        outs[i] = fused[i].data();
        backend->matmul(views[i], x.data(), n, alone[i].data());
      }
      backend->matmul_many(views, x.data(), n, outs);
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_TRUE(same_bits(fused[i], alone[i])) << "matrix " << i << ", n " << n << ", threads " << threads;
      }
    }
  }
  auto backend = make_cpu_backend(2);
  const Weight narrow = make_weight(DType::Q8_0, 8, 256, rng);
  const WeightView mixed[2] = {q.view(), narrow.view()};
  std::vector<float> x(512), y0(64), y1(8);
  float* outs[2] = {y0.data(), y1.data()};
  EXPECT_THROW(backend->matmul_many(mixed, x.data(), 1, outs), Error);  // different input widths
  float* one_out[1] = {y0.data()};
  EXPECT_THROW(backend->matmul_many(mixed, x.data(), 1, one_out), Error);  // outputs != matrices
}

TEST(CpuBackendFused, GatedFfnEqualsMatmulsThenActivation) {
  std::mt19937 rng(22);
  for (DType type : {DType::Q4_K, DType::Q8_0, DType::F16}) {
    const Weight gate = make_weight(type, 83, 256, rng);
    const Weight up = make_weight(type == DType::Q4_K ? DType::Q6_K : type, 83, 256, rng);
    for (GatedActivation act : {GatedActivation::Silu, GatedActivation::GeluTanh}) {
      for (int threads : {1, 2}) {
        auto backend = make_cpu_backend(threads);
        for (int64_t n : {1, 4, 19}) {
          const std::vector<float> x = random_floats(rng, size_t(n * 256), -2.0f, 2.0f);
          std::vector<float> g(size_t(n * 83)), u(g.size()), expected(g.size()), fused(g.size());
          backend->matmul(gate.view(), x.data(), n, g.data());
          backend->matmul(up.view(), x.data(), n, u.data());
          if (act == GatedActivation::Silu) {
            backend->silu_mul(g.data(), u.data(), int64_t(g.size()), expected.data());
          } else {
            backend->gelu_mul(g.data(), u.data(), int64_t(g.size()), expected.data());
          }
          backend->gated_ffn(gate.view(), up.view(), act, x.data(), n, fused.data());
          EXPECT_TRUE(same_bits(fused, expected))
              << dtype_name(type) << (act == GatedActivation::Silu ? " silu" : " gelu") << ", n " << n
              << ", threads " << threads;
        }
      }
    }
  }
  auto backend = make_cpu_backend(1);
  const Weight gate = make_weight(DType::Q8_0, 8, 64, rng);
  const Weight up = make_weight(DType::Q8_0, 9, 64, rng);
  std::vector<float> x(64), out(9);
  EXPECT_THROW(backend->gated_ffn(gate.view(), up.view(), GatedActivation::Silu, x.data(), 1, out.data()), Error);
}

TEST(CpuBackendFused, AddRmsNormEqualsAddThenRmsNorm) {
  std::mt19937 rng(23);
  for (int64_t width : {7, 640, 2048}) {
    for (int64_t n : {1, 40}) {  // 40 x 2048 is past the size where rows split across threads
      const std::vector<float> x0 = random_floats(rng, size_t(n * width), -4.0f, 4.0f);
      const std::vector<float> y = random_floats(rng, size_t(n * width), -4.0f, 4.0f);
      const std::vector<float> weight = random_floats(rng, size_t(width), 0.5f, 2.0f);
      auto backend = make_cpu_backend(2);
      std::vector<float> x_parts = x0, out_parts(x0.size());
      backend->add(x_parts.data(), y.data(), n * width);
      backend->rms_norm(x_parts.data(), weight.data(), n, width, 1e-6f, out_parts.data());
      std::vector<float> x_fused = x0, out_fused(x0.size());
      backend->add_rms_norm(x_fused.data(), y.data(), weight.data(), n, width, 1e-6f, out_fused.data());
      EXPECT_TRUE(same_bits(x_fused, x_parts)) << "width " << width << ", n " << n;
      EXPECT_TRUE(same_bits(out_fused, out_parts)) << "width " << width << ", n " << n;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// rope

void reference_rope(std::vector<double>& x, const std::vector<int32_t>& pos, int n_heads, int head_dim,
                    const RopeParams& p) {
  const int half = p.n_rot / 2;
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int h = 0; h < n_heads; ++h) {
      double* head = x.data() + (int64_t(t) * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        double theta = double(pos[t]) * p.freq_scale * std::pow(double(p.freq_base), -2.0 * i / p.n_rot);
        if (p.freq_factors) theta /= p.freq_factors[i];
        const int a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
        const double x0 = head[a], x1 = head[b];
        head[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
        head[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
      }
    }
  }
}

TEST(CpuBackend, RopeMatchesReference) {
  auto backend = make_cpu_backend(1);
  std::mt19937 rng(6);
  const std::vector<int32_t> positions = {0, 1, 1000, 37};
  constexpr int kHeads = 3;
  for (int head_dim : {8, 64}) {
    for (int n_rot : {head_dim, head_dim / 2}) {
      for (bool neox : {false, true}) {
        for (float freq_scale : {1.0f, 0.25f}) {
          for (bool factors : {false, true}) {
            std::vector<float> ff(size_t(n_rot / 2));
            for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + float(i % 5);
            RopeParams p;
            p.n_rot = n_rot;
            p.freq_base = head_dim == 8 ? 10000.0f : 500000.0f;
            p.freq_scale = freq_scale;
            p.neox = neox;
            p.freq_factors = factors ? ff.data() : nullptr;
            SCOPED_TRACE(testing::Message() << "head_dim " << head_dim << " n_rot " << n_rot << " neox "
                                            << neox << " scale " << freq_scale << " factors " << factors);
            const std::vector<float> x = random_floats(rng, positions.size() * kHeads * size_t(head_dim));
            std::vector<float> got = x;
            backend->rope(got.data(), positions.data(), int64_t(positions.size()), kHeads, head_dim, p);
            std::vector<double> ref(x.begin(), x.end());
            reference_rope(ref, positions, kHeads, head_dim, p);
            for (size_t t = 0; t < positions.size(); ++t) {
              for (int h = 0; h < kHeads; ++h) {
                for (int d = 0; d < head_dim; ++d) {
                  const size_t k = (t * kHeads + size_t(h)) * size_t(head_dim) + size_t(d);
                  if (d >= n_rot || positions[t] == 0) {
                    // Not rotated (or rotated by 0: cos 1, sin 0): bitwise untouched.
                    ASSERT_EQ(float_bits(got[k]), float_bits(x[k])) << "t " << t << " d " << d;
                    continue;
                  }
                  // theta = pos * scale * base^(-2i/n) / factor is formed in float: a few roundings,
                  // so an absolute error of ~4u|theta| in the angle (0.00024 rad at pos 1000), plus
                  // float cos/sin and the 2-term rotation. Values are in [-1, 1]: |pair| <= sqrt 2.
                  const double tol = std::sqrt(2.0) * 8.0 * kU * (double(positions[t]) + 1.0);
                  ASSERT_NEAR(got[k], ref[k], tol) << "t " << t << " h " << h << " d " << d;
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kestrel
