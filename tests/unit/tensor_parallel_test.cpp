// Model-free parts of running one model over several ranks (src/dist, model_shard.h, runner's step
// messages):
//  - the Megatron split of real model shapes (Qwen2.5-0.5B's 14 heads over 2 KV heads, Gemma 3
//    270M's 4 heads over 1, Llama 3 8B), every head, KV head, FFN channel and vocabulary row owned
//    as the split's rules say, and models that cannot be split refused with the reason;
//  - row-parallel shards: for every weight format, sum over ranks of W[:, cols_r] x[cols_r] equals
//    W x (the one-process matmul) up to float summation order, whether the cut keeps whole blocks
//    or falls inside one (F32 fallback);
//  - the shared-memory collectives run by threads as ranks: rank-order sums, bitwise the same on
//    every rank, across many calls (the double-buffered slots reused);
//  - the step message round trip and pipeline micro-batch slicing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/shm_group.h"
#include "iq_grid_blocks.h"
#include "model/model.h"
#include "model/model_shard.h"
#include "quant/format.h"
#include "runner/model_runner.h"
#include "runner/step_message.h"

namespace kestrel {
namespace {

ModelConfig shape(int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_embd, int64_t n_ff,
                  int64_t n_vocab, int64_t n_layer) {
  ModelConfig c;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  c.head_dim = head_dim;
  c.n_embd = n_embd;
  c.n_ff = n_ff;
  c.n_vocab = n_vocab;
  c.n_layer = n_layer;
  return c;
}

// Every rank's slices tile the whole: consecutive, covering, query heads inside their KV heads.
void expect_tiles(const ModelConfig& c, int tp, int64_t ff_align) {
  const ModelShard s = plan_model_shard(c, tp, 0, 1, 0, ff_align, false);
  ASSERT_EQ(int(s.slices.size()), tp);
  int64_t ff = 0, vocab = 0, embd = 0;
  std::vector<int> head_owners(size_t(c.n_head), 0);
  for (const RankSlice& r : s.slices) {
    EXPECT_EQ(r.ff_begin, ff);
    EXPECT_EQ(r.vocab_begin, vocab);
    EXPECT_EQ(r.embd_begin, embd);
    EXPECT_EQ(r.ff_begin % ff_align, 0);
    EXPECT_GT(r.n_ff(), 0);
    EXPECT_GT(r.n_head(), 0);
    ff = r.ff_end;
    vocab = r.vocab_end;
    embd = r.embd_end;
    const int64_t group = c.n_head / c.n_head_kv;
    for (int64_t h = r.q_head_begin; h < r.q_head_end; ++h) {
      ++head_owners[size_t(h)];
      // A rank's query heads read only the KV heads it holds.
      EXPECT_GE(h / group, r.kv_head_begin);
      EXPECT_LT(h / group, r.kv_head_end);
    }
  }
  EXPECT_EQ(ff, c.n_ff);
  EXPECT_EQ(vocab, c.n_vocab);
  EXPECT_EQ(embd, c.n_embd);
  for (int owners : head_owners) EXPECT_EQ(owners, 1);
}

TEST(ModelShard, RealShapesSplitIntoWholeHeadsBlocksAndRows) {
  const ModelConfig qwen05 = shape(14, 2, 64, 896, 4864, 151936, 24);
  expect_tiles(qwen05, 2, 256);
  expect_tiles(qwen05, 4, 256);
  const ModelShard q4 = plan_model_shard(qwen05, 4, 1, 1, 0, 256, false);
  // 7 query heads per KV head, two ranks per KV head: 3 + 4.
  EXPECT_EQ(q4.slices[0].n_head(), 3);
  EXPECT_EQ(q4.slices[1].n_head(), 4);
  EXPECT_EQ(q4.slices[1].kv_head_begin, 0);
  EXPECT_EQ(q4.slices[2].kv_head_begin, 1);
  const ModelConfig gemma = shape(4, 1, 256, 640, 2048, 262144, 18);
  expect_tiles(gemma, 2, 256);
  expect_tiles(gemma, 4, 256);
  const ModelConfig llama8b = shape(32, 8, 128, 4096, 14336, 128256, 32);
  expect_tiles(llama8b, 2, 256);
  expect_tiles(llama8b, 8, 256);
  EXPECT_EQ(plan_model_shard(llama8b, 8, 3, 1, 0, 256, false).mine().n_head_kv(), 1);
}

TEST(ModelShard, PipelineStagesOwnContiguousLayers) {
  const ModelConfig c = shape(8, 4, 8, 64, 172, 512, 5);
  int64_t next = 0;
  for (int stage = 0; stage < 2; ++stage) {
    const ModelShard s = plan_model_shard(c, 1, 0, 2, stage, 4, false);
    EXPECT_EQ(s.layer_begin, next);
    next = s.layer_end;
    EXPECT_EQ(s.first_stage(), stage == 0);
    EXPECT_EQ(s.last_stage(), stage == 1);
  }
  EXPECT_EQ(next, 5);
}

TEST(ModelShard, UnsplittableModelsAreRefusedWithTheReason) {
  const ModelConfig qwen05 = shape(14, 2, 64, 896, 4864, 151936, 24);
  try {
    plan_model_shard(qwen05, 3, 0, 1, 0, 256, false);
    FAIL() << "3 ranks over 2 KV heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot split 14 query heads sharing 2 KV heads"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(plan_model_shard(qwen05, 16, 0, 1, 0, 256, false), Error);  // 8 ranks per KV head > 7 heads
  EXPECT_THROW(plan_model_shard(shape(8, 4, 8, 64, 172, 512, 5), 1, 0, 6, 0, 4, false), Error);  // 6 stages, 5 layers
}

// ---------------------------------------------------------------------------------------------

struct Encoded {
  WeightView view;
  std::vector<uint8_t> bytes;
};

Encoded encode(const quant::WeightFormat& f, const std::vector<float>& w, int64_t rows, int64_t cols) {
  Encoded e;
  const int64_t rb = quant::row_bytes(f, cols);
  e.bytes.resize(size_t(rows * rb));
  std::mt19937 rng(uint32_t(f.type));
  for (int64_t r = 0; r < rows; ++r) {
    if (test::is_iq_grid_format(f.type)) {  // random valid blocks: every grid entry, sign and scale
      test::random_iq_grid_row(f.type, cols, 0.01f, rng, e.bytes.data() + r * rb);
    } else {
      f.quantize_row(w.data() + r * cols, e.bytes.data() + r * rb, cols);
    }
  }
  e.view = WeightView{f.type, rows, cols, e.bytes.data()};
  return e;
}

TEST(RowParallel, ShardSumsEqualTheWholeMatmulForEveryFormat) {
  auto backend = make_cpu_backend(1);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const quant::WeightFormat& f : quant::all_formats()) {
    const int64_t cols = 4 * std::max<int64_t>(f.block_size, 32), rows = 37, T = 3;
    std::vector<float> w(size_t(rows * cols)), x(size_t(T * cols));
    for (float& v : w) v = normal(rng);
    for (float& v : x) v = normal(rng);
    const Encoded e = encode(f, w, rows, cols);
    std::vector<float> whole(size_t(T * rows));
    backend->matmul(e.view, x.data(), T, whole.data());
    // Two cuts: on a block boundary (whole blocks copied) and, where blocks are longer than one
    // element, inside a block (the slice dequantized to F32).
    for (int64_t cut : {cols / 2, f.block_size > 1 ? cols / 2 + 1 : cols / 4}) {
      std::vector<LargeBuffer> owned;
      std::vector<float> sum(size_t(T * rows), 0.0f), part(size_t(T * rows));
      for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, cut}, {cut, cols}}) {
        const WeightView shard = slice_columns(e.view, begin, end, owned);
        std::vector<float> xs(size_t(T * (end - begin)));
        for (int64_t t = 0; t < T; ++t) {
          std::copy_n(x.data() + t * cols + begin, end - begin, xs.data() + t * (end - begin));
        }
        backend->matmul(shard, xs.data(), T, part.data());
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
      }
      double worst = 0.0, scale = 0.0;
      for (size_t i = 0; i < sum.size(); ++i) {
        worst = std::max(worst, double(std::fabs(sum[i] - whole[i])));
        scale = std::max(scale, double(std::fabs(whole[i])));
      }
      // Whole-block shards see the same activation blocks as the whole row: only the order of the
      // float sums differs. A cut inside a block multiplies F32 activations instead of the
      // format's quantized ones: that format's activation rounding (Q8 of an N(0,1) row) apart.
      // W8A8 quantizes a token's activations over the whole row (each shard's slice on its own),
      // so every cut changes their scale.
      const bool exact_blocks = cut % f.block_size == 0 && f.type != DType::W8A8;
      EXPECT_LE(worst, (exact_blocks ? 1e-5 : 2e-2) * scale)
          << dtype_name(f.type) << " cut at " << cut << " of " << cols;
    }
  }
}

// ---------------------------------------------------------------------------------------------

TEST(ShmGroup, ThreadsAsRanksGetRankOrderSumsBitwiseEqual) {
  constexpr int kRanks = 3;
  constexpr int64_t kCapacity = 1000;  // smaller than the longest reduction: chunked
  std::vector<uint8_t> segment(size_t(dist::ShmGroup::segment_bytes(kRanks, kCapacity)) + 64, 0);
  std::vector<std::vector<std::vector<float>>> results(kRanks);
  std::vector<std::vector<float>> gathered(kRanks);
  auto rank_main = [&](int rank) {
    dist::ShmGroup group(segment.data(), rank, kRanks, kCapacity);
    std::mt19937 rng{static_cast<uint32_t>(rank)};
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int call = 0; call < 50; ++call) {
      std::vector<float> data(size_t(call % 2 == 0 ? 2500 : 7));
      for (float& v : data) v = u(rng) * float(1 + call);
      group.all_reduce_sum(data, [] {});
      results[size_t(rank)].push_back(data);
    }
    std::vector<float> mine(size_t(rank + 1), float(rank));
    std::vector<int64_t> counts = {1, 2, 3};
    gathered[size_t(rank)].resize(6);
    EXPECT_TRUE(group.all_gather(mine, gathered[size_t(rank)], counts, [] {}));
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  // The expected sums, recomputed from each rank's inputs in rank order.
  std::vector<std::mt19937> rngs;
  for (int r = 0; r < kRanks; ++r) rngs.emplace_back(uint32_t(r));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int call = 0; call < 50; ++call) {
    const size_t n = call % 2 == 0 ? 2500 : 7;
    std::vector<std::vector<float>> inputs(kRanks, std::vector<float>(n));
    for (int r = 0; r < kRanks; ++r) {
      for (float& v : inputs[size_t(r)]) v = u(rngs[size_t(r)]) * float(1 + call);
    }
    for (size_t i = 0; i < n; ++i) {
      const float want = (inputs[0][i] + inputs[1][i]) + inputs[2][i];
      for (int r = 0; r < kRanks; ++r) {
        ASSERT_EQ(std::memcmp(&results[size_t(r)][size_t(call)][i], &want, sizeof(float)), 0)
            << "call " << call << " element " << i << " rank " << r;
      }
    }
  }
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(gathered[size_t(r)], (std::vector<float>{0, 1, 1, 2, 2, 2}));
}

// ---------------------------------------------------------------------------------------------

TEST(StepMessage, RoundTripsAndSlicesIntoMicroBatches) {
  const std::vector<TokenId> a = {5, 6, 7, 8}, b = {9};
  const std::vector<BlockId> ta = {0, 1}, tb = {2, 3};
  SequenceChunk ca{a, 0, {std::span<const BlockId>(ta)}, 3};
  SequenceChunk cb{b, 20, {std::span<const BlockId>(tb)}, 0};
  const std::vector<SequenceChunk> chunks = {ca, cb};
  (void)cb;
  const ForwardBatch batch = build_forward_batch(chunks, 16, 1);
  const std::vector<std::byte> bytes = encode_forward_batch(batch);
  const ForwardBatch back = decode_forward_batch(bytes);
  EXPECT_EQ(back.token_ids, batch.token_ids);
  EXPECT_EQ(back.positions, batch.positions);
  EXPECT_EQ(back.token_seq, batch.token_seq);
  EXPECT_EQ(back.logits_indices, batch.logits_indices);
  EXPECT_EQ(back.kv_groups[0].slot_mapping, batch.kv_groups[0].slot_mapping);
  EXPECT_EQ(back.kv_groups[0].block_tables, batch.kv_groups[0].block_tables);
  // A truncated message is an error, not a crash.
  EXPECT_THROW(decode_forward_batch(std::span(bytes).first(bytes.size() - 3)), Error);
  // Tokens [2, 5): the first sequence's last two and the second's one, logits rows renumbered.
  const ForwardBatch piece = slice_forward_batch(batch, 2, 5);
  EXPECT_EQ(piece.token_ids, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(piece.positions, (std::vector<int32_t>{2, 3, 20}));
  EXPECT_EQ(piece.logits_indices, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(piece.kv_groups[0].slot_mapping, (std::vector<int64_t>{2, 3, 3 * 16 + 20 % 16}));
}

}  // namespace
}  // namespace kestrel
