// The CPU backend (backend/backend.h) against naive double-precision references written here:
// matmul for every weight format (including batch and thread-count invariance, bit for bit),
// get_rows, rms_norm, rope, silu_mul, gelu_mul, add, kv_write and paged attention over scattered
// blocks; the fused ops (matmul_many, gated_ffn, add_rms_norm) bit for bit equal to their parts.
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

// ---------------------------------------------------------------------------------------------
// kv_write + paged_attention

struct AttentionScenario {
  PagedAttentionArgs args;
  int64_t kv_width = 0;
  std::vector<int32_t> lengths;                  // per sequence
  std::vector<std::vector<float>> seq_k, seq_v;  // contiguous [len][kv_width] per sequence
  std::vector<int32_t> block_tables, positions, token_seq;
  std::vector<float> k_cache, v_cache, q;
};

// Builds sequences of the given lengths whose blocks are shuffled across the pool, writes their
// K/V through kv_write (in shuffled chunks, with padding tokens) and checks the cache contents.
AttentionScenario make_scenario(Backend& backend, std::mt19937& rng, int head_dim, int n_kv_head,
                                int block_size, int window, const std::vector<int32_t>& lengths) {
  AttentionScenario s;
  s.lengths = lengths;
  s.kv_width = int64_t(n_kv_head) * head_dim;
  const int max_len = *std::max_element(lengths.begin(), lengths.end());
  const int max_blocks = (max_len + block_size - 1) / block_size + 1;  // one unused entry
  int needed = 0;
  for (int32_t len : lengths) needed += (len + block_size - 1) / block_size;
  const int num_blocks = needed + 5;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  s.block_tables.assign(lengths.size() * size_t(max_blocks), -1);
  size_t next = 0;
  for (size_t seq = 0; seq < lengths.size(); ++seq) {
    for (int b = 0; b * block_size < lengths[seq]; ++b) s.block_tables[seq * size_t(max_blocks) + size_t(b)] = ids[next++];
  }
  // Unwritten slots hold NaN: reading one would poison the output.
  const size_t cache_floats = size_t(num_blocks) * size_t(block_size) * size_t(s.kv_width);
  s.k_cache.assign(cache_floats, std::numeric_limits<float>::quiet_NaN());
  s.v_cache = s.k_cache;
  std::vector<float> expected_k = s.k_cache, expected_v = s.v_cache;

  // Every (seq, pos) with its slot, in shuffled order; plus padding tokens (slot -1).
  struct Row { int64_t slot; std::vector<float> k, v; };
  std::vector<Row> rows;
  for (size_t seq = 0; seq < lengths.size(); ++seq) {
    s.seq_k.push_back(random_floats(rng, size_t(lengths[seq]) * size_t(s.kv_width)));
    s.seq_v.push_back(random_floats(rng, size_t(lengths[seq]) * size_t(s.kv_width)));
    for (int32_t p = 0; p < lengths[seq]; ++p) {
      const int64_t slot = int64_t(s.block_tables[seq * size_t(max_blocks) + size_t(p / block_size)]) * block_size +
                           p % block_size;
      const auto kb = s.seq_k[seq].begin() + p * s.kv_width, vb = s.seq_v[seq].begin() + p * s.kv_width;
      rows.push_back({slot, {kb, kb + s.kv_width}, {vb, vb + s.kv_width}});
      std::copy(kb, kb + s.kv_width, expected_k.begin() + slot * s.kv_width);
      std::copy(vb, vb + s.kv_width, expected_v.begin() + slot * s.kv_width);
    }
  }
  for (int i = 0; i < 3; ++i) rows.push_back({-1, std::vector<float>(size_t(s.kv_width), 7.0f), std::vector<float>(size_t(s.kv_width), 7.0f)});
  std::shuffle(rows.begin(), rows.end(), rng);
  for (size_t begin = 0; begin < rows.size(); begin += 37) {
    const size_t end = std::min(rows.size(), begin + 37);
    std::vector<float> k, v;
    std::vector<int64_t> slots;
    for (size_t i = begin; i < end; ++i) {
      k.insert(k.end(), rows[i].k.begin(), rows[i].k.end());
      v.insert(v.end(), rows[i].v.begin(), rows[i].v.end());
      slots.push_back(rows[i].slot);
    }
    backend.kv_write({s.k_cache.data(), s.v_cache.data()}, k.data(), v.data(), slots.data(),
                     int64_t(slots.size()), s.kv_width);
  }
  // kv_write is a copy: bitwise, NaN sentinels included (padding rows wrote nothing).
  EXPECT_EQ(std::memcmp(s.k_cache.data(), expected_k.data(), cache_floats * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(s.v_cache.data(), expected_v.data(), cache_floats * sizeof(float)), 0);

  s.args.block_size = block_size;
  s.args.max_blocks_per_seq = max_blocks;
  s.args.n_head = 8;
  s.args.n_kv_head = n_kv_head;
  s.args.head_dim = head_dim;
  s.args.scale = 1.0f / std::sqrt(float(head_dim));
  s.args.window = window;
  return s;
}

// Adds query tokens: a causal prefill chunk of consecutive positions, decode tokens (last
// position), and a few arbitrary positions; batch order shuffled.
void add_queries(AttentionScenario& s, std::mt19937& rng) {
  std::vector<std::pair<int32_t, int32_t>> tokens;  // (seq, pos)
  for (size_t seq = 0; seq < s.lengths.size(); ++seq) {
    const int32_t len = s.lengths[seq];
    tokens.push_back({int32_t(seq), len - 1});
    if (len >= 20) {
      for (int32_t p = len - 12; p < len - 1; ++p) tokens.push_back({int32_t(seq), p});
      tokens.push_back({int32_t(seq), 0});
      tokens.push_back({int32_t(seq), len / 2});
    }
  }
  std::shuffle(tokens.begin(), tokens.end(), rng);
  for (auto [seq, pos] : tokens) {
    s.token_seq.push_back(seq);
    s.positions.push_back(pos);
  }
  s.q = random_floats(rng, tokens.size() * size_t(s.args.n_head * s.args.head_dim));
  s.args.num_tokens = int64_t(tokens.size());
  s.args.positions = s.positions.data();
  s.args.token_seq = s.token_seq.data();
  s.args.block_tables = s.block_tables.data();
}

// Naive softmax(q k^T * scale) v over the contiguous copy, in double, and checks `out`.
void check_attention(const AttentionScenario& s, const std::vector<float>& out) {
  const PagedAttentionArgs& a = s.args;
  const int group = a.n_head / a.n_kv_head;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int32_t seq = s.token_seq[size_t(t)], pos = s.positions[size_t(t)];
    const int32_t first = a.window > 0 ? std::max(0, pos - a.window + 1) : 0;
    const int len = pos - first + 1;
    for (int h = 0; h < a.n_head; ++h) {
      const float* q = s.q.data() + (t * a.n_head + h) * a.head_dim;
      const int64_t kv_off = int64_t(h / group) * a.head_dim;
      std::vector<double> scores;
      double max_score = -INFINITY, max_qk = 0.0;
      for (int32_t p = first; p <= pos; ++p) {
        const float* k = s.seq_k[size_t(seq)].data() + p * s.kv_width + kv_off;
        double dot = 0.0, abs_dot = 0.0;
        for (int d = 0; d < a.head_dim; ++d) dot += double(q[d]) * k[d], abs_dot += std::fabs(double(q[d]) * k[d]);
        scores.push_back(dot * a.scale);
        max_score = std::max(max_score, scores.back());
        max_qk = std::max(max_qk, abs_dot * a.scale);
      }
      double total = 0.0;
      for (double& sc : scores) total += sc = std::exp(sc - max_score);
      // Score error (float dot of head_dim terms) <= head_dim u sum|q k| scale, which shifts each
      // weight by that relative amount (twice: numerator and denominator); the online softmax adds
      // a few roundings per position. Values are in [-1, 1], so this is relative to max|v| = 1.
      const double tol = 2.0 * a.head_dim * kU * max_qk + (4.0 * len + 16.0) * kU;
      for (int d = 0; d < a.head_dim; ++d) {
        double ref = 0.0;
        for (int32_t p = first; p <= pos; ++p) {
          ref += scores[size_t(p - first)] * s.seq_v[size_t(seq)][size_t(p * s.kv_width + kv_off + d)];
        }
        ref /= total;
        ASSERT_NEAR(out[size_t((t * a.n_head + h) * a.head_dim + d)], ref, tol)
            << "token " << t << " seq " << seq << " pos " << pos << " head " << h << " d " << d;
      }
    }
  }
}

std::vector<float> run_attention(Backend& backend, const AttentionScenario& s) {
  std::vector<float> out(size_t(s.args.num_tokens * s.args.n_head * s.args.head_dim),
                         std::numeric_limits<float>::quiet_NaN());
  backend.paged_attention(s.args, s.q.data(), {const_cast<float*>(s.k_cache.data()), const_cast<float*>(s.v_cache.data())},
                          out.data());
  return out;
}

TEST(CpuBackendAttention, FullCausalOverScatteredBlocks) {
  auto one = make_cpu_backend(1);
  auto two = make_cpu_backend(2);
  std::mt19937 rng(7);
  const std::vector<int32_t> lengths = {1, 7, 16, 17, 33, 64, 200};
  for (int head_dim : {8, 64}) {
    for (int n_kv_head : {8, 4, 2, 1}) {  // GQA ratio 1, 2, 4, 8
      for (int block_size : {16, 1, 7}) {
        SCOPED_TRACE(testing::Message() << "head_dim " << head_dim << " n_kv_head " << n_kv_head
                                        << " block_size " << block_size);
        AttentionScenario s = make_scenario(*one, rng, head_dim, n_kv_head, block_size, 0, lengths);
        add_queries(s, rng);
        const std::vector<float> out = run_attention(*two, s);
        check_attention(s, out);
        // Each (token, head) is computed independently: one thread gives the same bits.
        EXPECT_TRUE(same_bits(out, run_attention(*one, s)));
      }
    }
  }
}

TEST(CpuBackendAttention, SlidingWindow) {
  auto backend = make_cpu_backend(2);
  std::mt19937 rng(8);
  for (int window : {5, 16, 33}) {
    for (int block_size : {16, 7, 1}) {
      for (int n_kv_head : {2, 8}) {
        SCOPED_TRACE(testing::Message() << "window " << window << " block_size " << block_size);
        AttentionScenario s = make_scenario(*backend, rng, 8, n_kv_head, block_size, window, {3, 5, 6, 34, 120});
        add_queries(s, rng);
        check_attention(s, run_attention(*backend, s));
      }
    }
  }
}

TEST(CpuBackendAttention, TokenAloneEqualsTokenInMixedBatch) {
  auto backend = make_cpu_backend(2);
  std::mt19937 rng(9);
  AttentionScenario s = make_scenario(*backend, rng, 64, 2, 16, 0, {5, 40, 130});
  add_queries(s, rng);
  const std::vector<float> batch = run_attention(*backend, s);
  const int64_t width = s.args.n_head * s.args.head_dim;
  for (int64_t t = 0; t < s.args.num_tokens; ++t) {
    AttentionScenario single = s;
    single.positions = {s.positions[size_t(t)]};
    single.token_seq = {s.token_seq[size_t(t)]};
    single.q.assign(s.q.begin() + t * width, s.q.begin() + (t + 1) * width);
    single.args.num_tokens = 1;
    single.args.positions = single.positions.data();
    single.args.token_seq = single.token_seq.data();
    single.args.block_tables = single.block_tables.data();
    EXPECT_TRUE(same_bits(run_attention(*backend, single),
                          std::vector<float>(batch.begin() + t * width, batch.begin() + (t + 1) * width)))
        << "token " << t;
  }
}

// Contexts past one 512-position partition: a decode token alone is split across threads by
// partition (flash-decoding), the same token inside a big batch is not; both must equal the naive
// reference and each other bit for bit. Lengths up to 2,000, crossing partition boundaries.
TEST(CpuBackendAttention, LongContextsSplitByPartitionMatchReferenceAndBatch) {
  auto backend = make_cpu_backend(2);
  std::mt19937 rng(10);
  for (int window : {0, 700}) {
    AttentionScenario s = make_scenario(*backend, rng, 64, 2, 16, window, {1, 511, 512, 513, 1100, 2000});
    add_queries(s, rng);
    const std::vector<float> batch = run_attention(*backend, s);
    check_attention(s, batch);
    const int64_t width = s.args.n_head * s.args.head_dim;
    for (int64_t t = 0; t < s.args.num_tokens; t += 3) {
      AttentionScenario single = s;
      single.positions = {s.positions[size_t(t)]};
      single.token_seq = {s.token_seq[size_t(t)]};
      single.q.assign(s.q.begin() + t * width, s.q.begin() + (t + 1) * width);
      single.args.num_tokens = 1;
      single.args.positions = single.positions.data();
      single.args.token_seq = single.token_seq.data();
      single.args.block_tables = single.block_tables.data();
      EXPECT_TRUE(same_bits(run_attention(*backend, single),
                            std::vector<float>(batch.begin() + t * width, batch.begin() + (t + 1) * width)))
          << "window " << window << " token " << t << " position " << s.positions[size_t(t)];
    }
  }
}

}  // namespace
}  // namespace kestrel
