// kv_write and paged attention for every K/V cache type (core/kv_spec.h) and every pair of them, on
// every ISA this machine runs (each forced with KESTREL_ISA), against references written here:
//  - kv_write stores exactly quant/'s reference quantize_row of each (token, head), and nothing
//    for padding tokens;
//  - attention equals a naive double-precision softmax(q k^T * scale) v over the cache's
//    reference-dequantized K/V (so the check is of the kernel, to rounding, not of the
//    quantization), for odd head sizes, GQA ratios 1-8, block sizes 1/7/16, lengths 1..2,000,
//    sliding windows, and attention sinks over a rolling window: there the reference rotates the
//    sink keys forward by the window's shift (R(d) k, in double) where the kernel rotates the query
//    back, with and without the Hadamard rotation of Q and K;
//  - a token's output is bitwise the same alone and inside a mixed batch (batch invariance), and
//    with 1 or 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/kv_spec.h"
#include "isa_env.h"
#include "quant/format.h"

namespace kestrel {
namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24, unit roundoff of float

std::vector<float> random_floats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The orthonormal Walsh-Hadamard transform in double (reference for the rotated cache).
void hadamard(std::vector<double>& x) {
  const size_t n = x.size();
  for (size_t len = 1; len < n; len <<= 1) {
    for (size_t i = 0; i < n; i += 2 * len) {
      for (size_t j = i; j < i + len; ++j) {
        const double a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
  for (double& v : x) v /= std::sqrt(double(n));
}

struct Shape {
  DType k_type = DType::F16, v_type = DType::F16;
  int head_dim = 64, n_kv_head = 2, n_head = 8, block_size = 16;
  int window = 0, sinks = 0;
  bool rotated = false;
  std::vector<int32_t> lengths;
};

// Sequences of the given lengths whose blocks are shuffled across the pool; their K/V go through
// kv_write in shuffled chunks with padding tokens; queries at chosen positions.
struct Scenario {
  Shape shape;
  int64_t kv_width = 0;
  std::vector<std::vector<float>> deq_k, deq_v;  // per sequence [len][kv_width], as the cache holds them
  std::vector<int32_t> block_tables, positions, token_seq;
  std::vector<uint8_t> k_cache, v_cache;
  std::vector<float> q;
  RopeParams rope;
  PagedAttentionArgs args;

  KvLayerView view() {
    KvLayerView v;
    v.k_type = shape.k_type;
    v.v_type = shape.v_type;
    v.k = k_cache.data();
    v.v = v_cache.data();
    v.k_row_bytes = dtype_row_bytes(shape.k_type, shape.head_dim);
    v.v_row_bytes = dtype_row_bytes(shape.v_type, shape.head_dim);
    v.num_slots = int64_t(k_cache.size()) / (shape.n_kv_head * v.k_row_bytes);
    v.n_kv_head = shape.n_kv_head;
    return v;
  }
};

Scenario make_scenario(Backend& backend, std::mt19937& rng, const Shape& shape) {
  Scenario s;
  s.shape = shape;
  const int hd = shape.head_dim, bs = shape.block_size;
  s.kv_width = int64_t(shape.n_kv_head) * hd;
  const int max_len = *std::max_element(shape.lengths.begin(), shape.lengths.end());
  const int max_blocks = (max_len + bs - 1) / bs + 1;  // one unused entry
  int needed = 0;
  for (int32_t len : shape.lengths) needed += (len + bs - 1) / bs;
  const int num_blocks = needed + 5;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  s.block_tables.assign(shape.lengths.size() * size_t(max_blocks), -1);
  size_t next = 0;
  for (size_t seq = 0; seq < shape.lengths.size(); ++seq) {
    for (int b = 0; b * bs < shape.lengths[seq]; ++b) s.block_tables[seq * size_t(max_blocks) + size_t(b)] = ids[next++];
  }
  // Unwritten slots hold all-ones bytes: NaN in every type (an F16/BF16 NaN, a NaN scale), so
  // reading one poisons the output.
  const int64_t k_row_bytes = dtype_row_bytes(shape.k_type, hd), v_row_bytes = dtype_row_bytes(shape.v_type, hd);
  s.k_cache.assign(size_t(num_blocks) * size_t(bs) * size_t(shape.n_kv_head * k_row_bytes), 0xff);
  s.v_cache.assign(size_t(num_blocks) * size_t(bs) * size_t(shape.n_kv_head * v_row_bytes), 0xff);
  const KvLayerView layout = s.view();
  std::vector<uint8_t> expected_k = s.k_cache, expected_v = s.v_cache;
  const quant::WeightFormat& kf = quant::require_format(shape.k_type);
  const quant::WeightFormat& vf = quant::require_format(shape.v_type);

  struct Row { int64_t slot; std::vector<float> k, v; };
  std::vector<Row> rows;
  for (size_t seq = 0; seq < shape.lengths.size(); ++seq) {
    const int32_t len = shape.lengths[seq];
    const std::vector<float> k = random_floats(rng, size_t(len) * size_t(s.kv_width));
    const std::vector<float> v = random_floats(rng, size_t(len) * size_t(s.kv_width));
    s.deq_k.emplace_back(k.size());
    s.deq_v.emplace_back(v.size());
    for (int32_t p = 0; p < len; ++p) {
      const int64_t slot = int64_t(s.block_tables[seq * size_t(max_blocks) + size_t(p / bs)]) * bs + p % bs;
      for (int h = 0; h < shape.n_kv_head; ++h) {
        const size_t off = size_t(p) * size_t(s.kv_width) + size_t(h) * size_t(hd);
        // The layout [head][slot]: each head's rows in slot order.
        const int64_t row = h * int64_t(num_blocks) * bs + slot;
        uint8_t* kd = expected_k.data() + row * layout.k_row_bytes;
        uint8_t* vd = expected_v.data() + row * layout.v_row_bytes;
        kf.quantize_row(k.data() + off, kd, hd);
        vf.quantize_row(v.data() + off, vd, hd);
        kf.dequantize_row(kd, s.deq_k[seq].data() + off, hd);
        vf.dequantize_row(vd, s.deq_v[seq].data() + off, hd);
      }
      rows.push_back({slot, {k.begin() + p * s.kv_width, k.begin() + (p + 1) * s.kv_width},
                      {v.begin() + p * s.kv_width, v.begin() + (p + 1) * s.kv_width}});
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
    backend.kv_write(s.view(), k.data(), v.data(), slots.data(), int64_t(slots.size()), shape.n_kv_head, hd);
  }
  // The cache holds exactly the reference encoding; padding rows wrote nothing.
  EXPECT_TRUE(s.k_cache == expected_k) << "K cache bytes differ from quant's reference (" << kv_type_name(shape.k_type) << ")";
  EXPECT_TRUE(s.v_cache == expected_v) << "V cache bytes differ from quant's reference (" << kv_type_name(shape.v_type) << ")";

  s.rope.n_rot = hd;
  s.rope.freq_base = 10000.0f;
  s.rope.neox = (hd / 8) % 2 == 0;
  s.args.block_size = bs;
  s.args.max_blocks_per_seq = max_blocks;
  s.args.n_head = shape.n_head;
  s.args.n_kv_head = shape.n_kv_head;
  s.args.head_dim = hd;
  s.args.scale = 1.0f / std::sqrt(float(hd));
  s.args.window = shape.window;
  s.args.sinks = shape.sinks;
  s.args.rotated = shape.rotated;
  s.args.sink_rope = &s.rope;
  return s;
}

// Query tokens: a causal prefill run of consecutive positions, the last position (decode) and a
// few arbitrary ones per sequence, batch order shuffled.
void add_queries(Scenario& s, std::mt19937& rng) {
  std::vector<std::pair<int32_t, int32_t>> tokens;  // (seq, pos)
  for (size_t seq = 0; seq < s.shape.lengths.size(); ++seq) {
    const int32_t len = s.shape.lengths[seq];
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

// The key a query at `pos` scores for position p: the cached key, and for a sink after the window
// moved, that key rotated forward by the shift (in Hadamard space when Q and K are rotated there).
// The angle is formed in float as RoPE forms it; the rotation itself is done here in double.
std::vector<double> visible_key(const Scenario& s, int32_t seq, int32_t pos, int32_t p, int64_t kv_off) {
  const int hd = s.args.head_dim;
  std::vector<double> k(static_cast<size_t>(hd));
  for (int d = 0; d < hd; ++d) k[size_t(d)] = s.deq_k[size_t(seq)][size_t(p * s.kv_width + kv_off + d)];
  const int32_t shift = s.args.sinks > 0 ? std::max(0, pos - s.args.window + 1) : 0;
  if (p >= s.args.sinks || shift == 0) return k;
  if (s.args.rotated) hadamard(k);
  const int half = s.rope.n_rot / 2;
  const float scaled = -float(shift) * s.rope.freq_scale;
  for (int i = 0; i < half; ++i) {
    const float inv_freq = std::pow(s.rope.freq_base, -2.0f * float(i) / float(s.rope.n_rot));
    const double theta = -double(scaled * inv_freq);  // rotating k forward = q back
    const int a = s.rope.neox ? i : 2 * i, b = s.rope.neox ? i + half : 2 * i + 1;
    const double x0 = k[size_t(a)], x1 = k[size_t(b)];
    k[size_t(a)] = x0 * std::cos(theta) - x1 * std::sin(theta);
    k[size_t(b)] = x0 * std::sin(theta) + x1 * std::cos(theta);
  }
  if (s.args.rotated) hadamard(k);
  return k;
}

bool visible(const PagedAttentionArgs& a, int32_t pos, int32_t p) {
  if (p > pos) return false;
  if (a.window <= 0) return true;
  if (a.sinks <= 0) return p > pos - a.window;
  return p < a.sinks || p >= std::max(a.sinks, pos - (a.window - a.sinks) + 1);
}

// Naive softmax attention in double over the visible keys, and checks `out`.
void check_attention(const Scenario& s, const std::vector<float>& out) {
  const PagedAttentionArgs& a = s.args;
  const int group = a.n_head / a.n_kv_head, hd = a.head_dim;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int32_t seq = s.token_seq[size_t(t)], pos = s.positions[size_t(t)];
    for (int h = 0; h < a.n_head; ++h) {
      const float* q = s.q.data() + (t * a.n_head + h) * hd;
      const int64_t kv_off = int64_t(h / group) * hd;
      std::vector<int32_t> seen;
      std::vector<double> scores;
      double max_score = -INFINITY, max_qk = 0.0, max_v = 1.0, sink_qk = 0.0;
      for (int32_t p = 0; p <= pos; ++p) {
        if (!visible(a, pos, p)) continue;
        const bool moved = p < a.sinks && pos - a.window + 1 > 0;
        const float* cached = s.deq_k[size_t(seq)].data() + p * s.kv_width + kv_off;
        const std::vector<double> rotated = moved ? visible_key(s, seq, pos, p, kv_off) : std::vector<double>();
        double dot = 0.0, abs_dot = 0.0;
        for (int d = 0; d < hd; ++d) {
          const double k = moved ? rotated[size_t(d)] : double(cached[d]);
          dot += double(q[d]) * k;
          abs_dot += std::fabs(double(q[d]) * k);
        }
        seen.push_back(p);
        scores.push_back(dot * a.scale);
        max_score = std::max(max_score, scores.back());
        max_qk = std::max(max_qk, abs_dot * a.scale);
        if (p < a.sinks) sink_qk = std::max(sink_qk, abs_dot * a.scale);
        for (int d = 0; d < hd; ++d) max_v = std::max(max_v, std::fabs(double(s.deq_v[size_t(seq)][size_t(p * s.kv_width + kv_off + d)])));
      }
      double total = 0.0;
      for (double& sc : scores) total += sc = std::exp(sc - max_score);
      // Score error (float dot of head_dim terms) <= head_dim u sum|q k| scale, which shifts each
      // weight by that relative amount (twice: numerator and denominator); the online softmax adds
      // a few roundings per position. A sink's query is rotated in float (cos/sin, two products and
      // a sum per pair, and two Hadamard passes of log2(hd) sums when rotated): a few u of |q| more.
      const int len = int(seen.size());
      const double sink_u = (8.0 + (a.rotated ? 4.0 * std::log2(double(hd)) : 0.0)) * std::sqrt(double(hd));
      const double tol = (2.0 * hd * kU * max_qk + 2.0 * sink_u * kU * sink_qk + (4.0 * len + 16.0) * kU) * max_v;
      for (int d = 0; d < hd; ++d) {
        double ref = 0.0;
        for (size_t i = 0; i < seen.size(); ++i) {
          ref += scores[i] * s.deq_v[size_t(seq)][size_t(seen[i] * s.kv_width + kv_off + d)];
        }
        ref /= total;
        ASSERT_NEAR(out[size_t((t * a.n_head + h) * hd + d)], ref, tol)
            << "token " << t << " seq " << seq << " pos " << pos << " head " << h << " d " << d;
      }
    }
  }
}

std::vector<float> run_attention(Backend& backend, Scenario& s) {
  std::vector<float> out(size_t(s.args.num_tokens * s.args.n_head * s.args.head_dim),
                         std::numeric_limits<float>::quiet_NaN());
  backend.paged_attention(s.args, s.q.data(), s.view(), out.data());
  return out;
}

// Each token of the batch alone (every `stride`-th) gives the same bits as inside the batch.
void check_batch_invariance(Backend& backend, Scenario& s, const std::vector<float>& batch, int stride = 1) {
  const int64_t width = s.args.n_head * s.args.head_dim;
  for (int64_t t = 0; t < s.args.num_tokens; t += stride) {
    Scenario single = s;
    single.positions = {s.positions[size_t(t)]};
    single.token_seq = {s.token_seq[size_t(t)]};
    single.q.assign(s.q.begin() + t * width, s.q.begin() + (t + 1) * width);
    single.args.num_tokens = 1;
    single.args.positions = single.positions.data();
    single.args.token_seq = single.token_seq.data();
    single.args.block_tables = single.block_tables.data();
    single.args.sink_rope = &single.rope;
    EXPECT_TRUE(same_bits(run_attention(backend, single),
                          std::vector<float>(batch.begin() + t * width, batch.begin() + (t + 1) * width)))
        << "token " << t << " at position " << s.positions[size_t(t)] << " differs alone and in the batch";
  }
}

// Runs one shape on every ISA: kv_write bytes, the reference, 1 vs 2 threads, batch invariance.
void check_shape(const Shape& shape, uint32_t seed, int invariance_stride = 1) {
  for (cpu::Isa isa : test::supported_isas()) {
    SCOPED_TRACE(testing::Message() << "isa " << cpu::isa_name(isa) << " K " << kv_type_name(shape.k_type) << " V "
                                    << kv_type_name(shape.v_type) << " head_dim " << shape.head_dim << " kv heads "
                                    << shape.n_kv_head << " block " << shape.block_size << " window " << shape.window
                                    << " sinks " << shape.sinks << (shape.rotated ? " rotated" : ""));
    test::IsaEnv env(std::string(cpu::isa_name(isa)).c_str());
    auto one = make_cpu_backend(1);
    auto two = make_cpu_backend(2);
    std::mt19937 rng(seed);
    Scenario s = make_scenario(*one, rng, shape);
    add_queries(s, rng);
    const std::vector<float> out = run_attention(*two, s);
    check_attention(s, out);
    if (testing::Test::HasFatalFailure()) return;
    EXPECT_TRUE(same_bits(out, run_attention(*one, s))) << "1 and 2 threads differ";
    check_batch_invariance(*two, s, out, invariance_stride);
  }
}

TEST(KvAttention, EveryKvTypePair) {
  uint32_t seed = 1;
  for (DType k : kv_types()) {
    for (DType v : kv_types()) {
      Shape shape;
      shape.k_type = k;
      shape.v_type = v;
      shape.lengths = {1, 17, 33, 100};
      check_shape(shape, seed++, 3);
    }
  }
}

// Head sizes that leave partial vector steps (8, 24, 40, 72 for the one-value-block types), GQA
// ratios 1 to 8, block sizes 16, 7 and 1.
TEST(KvAttention, OddHeadSizesGqaAndBlockSizes) {
  uint32_t seed = 100;
  for (DType type : kv_types()) {
    const bool blocked = dtype_layout(type).block_size > 1;
    const std::vector<int> head_dims = blocked ? std::vector<int>{32, 96} : std::vector<int>{8, 24, 40, 72};
    for (int head_dim : head_dims) {
      for (auto [n_kv_head, block_size] : {std::pair{8, 16}, std::pair{4, 7}, std::pair{1, 1}}) {
        Shape shape;
        shape.k_type = shape.v_type = type;
        shape.head_dim = head_dim;
        shape.n_kv_head = n_kv_head;
        shape.block_size = block_size;
        shape.lengths = {1, 7, 16, 17, 40};
        check_shape(shape, seed++, 5);
      }
    }
  }
}

TEST(KvAttention, SlidingWindow) {
  uint32_t seed = 200;
  for (DType type : {DType::F16, DType::Q8_0, DType::Q4_0}) {
    for (int window : {5, 16, 33}) {
      Shape shape;
      shape.k_type = shape.v_type = type;
      shape.window = window;
      shape.block_size = window == 16 ? 7 : 16;
      shape.lengths = {3, 6, 34, 120};
      check_shape(shape, seed++, 4);
    }
  }
}

// Contexts past one 512-position partition: a decode token alone is split across threads by
// partition (flash-decoding), the same token inside a big batch is not; both must equal the
// reference and each other bit for bit. Lengths up to 2,000, crossing partition boundaries.
TEST(KvAttention, LongContextsSplitByPartition) {
  uint32_t seed = 300;
  for (DType type : kv_types()) {
    for (int window : {0, 700}) {
      Shape shape;
      shape.k_type = shape.v_type = type;
      shape.window = window;
      shape.lengths = {1, 511, 513, 1100, 2000};
      check_shape(shape, seed++, 7);
    }
  }
}

// Attention sinks over a rolling window: sinks within one block and across blocks, windows that
// move well past the sinks (the first recent block shared with the sinks' last, and not), long
// sequences over several partitions, and the Hadamard rotation.
TEST(KvAttention, AttentionSinks) {
  uint32_t seed = 400;
  struct Case { int window, sinks, block_size; bool rotated; };
  for (DType type : {DType::F32, DType::F16, DType::FP8_E4M3_PC, DType::Q8_0, DType::Q4_0}) {
    for (const Case& c : {Case{64, 4, 16, false}, Case{100, 20, 7, true}, Case{40, 1, 1, false}, Case{600, 4, 16, true}}) {
      Shape shape;
      shape.k_type = shape.v_type = type;
      shape.window = c.window;
      shape.sinks = c.sinks;
      shape.block_size = c.block_size;
      shape.rotated = c.rotated;
      shape.lengths = {3, 50, 64, 65, 130, 1500};
      check_shape(shape, seed++, 5);
    }
  }
}

// Mixed K/V types with sinks and rotation (K quantized, V not, and the other way round).
TEST(KvAttention, MixedTypesWithSinks) {
  Shape shape;
  shape.k_type = DType::Q4_0;
  shape.v_type = DType::F32;
  shape.window = 48;
  shape.sinks = 4;
  shape.rotated = true;
  shape.lengths = {10, 47, 48, 49, 300};
  check_shape(shape, 500, 2);
  std::swap(shape.k_type, shape.v_type);
  shape.v_type = DType::Q8_0;
  check_shape(shape, 501, 2);
}

}  // namespace
}  // namespace kestrel
