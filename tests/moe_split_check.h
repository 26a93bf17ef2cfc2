// Tensor parallelism's split of a Mixture-of-Experts layer, checked without MPI: the model loaded
// whole and as each of two ranks, the same random input through moe_ffn. Megatron: the ranks'
// outputs, partial sums over their FFN channels, add up to the whole layer's (to float rounding:
// each rank's channels are whole blocks of the down projection's format, so its activations
// quantize as in the whole layer). --tp-deterministic: each rank's rows are bitwise the whole
// layer's rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "model/moe_ffn.h"

namespace kestrel::test {

inline void expect_tp_parts_add_up(const std::string& path, int64_t layer, double tolerance = 1e-5) {
  const auto whole = Model::load(path);
  const ModelConfig& c = whole->config();
  const MoeLayerWeights& full = whole->weights().layers[size_t(layer)].moe;
  ASSERT_TRUE(full.has_experts()) << path;
  auto backend = make_cpu_backend(2);
  const int64_t T = 5;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(T * c.n_embd));
  for (float& v : x) v = normal(rng);
  auto run = [&](const MoeLayerWeights& w) {
    MoeScratch scratch;
    std::vector<float> out(size_t(T * w.n_out));
    moe_ffn(*backend, c.moe, w, GatedActivation::Silu, x.data(), T, scratch, out.data());
    return out;
  };
  const std::vector<float> want = run(full);
  std::vector<float> sum(want.size(), 0.0f);
  int64_t channels = 0;
  for (int rank = 0; rank < 2; ++rank) {
    const auto part = Model::load(path, ShardRequest{2, rank, 1, 0, false});
    const MoeLayerWeights& m = part->weights().layers[size_t(layer)].moe;
    EXPECT_EQ(m.n_out, c.n_embd);
    EXPECT_EQ(m.gate_stack.rows, m.n_expert * m.n_ff_expert);
    EXPECT_EQ(m.down_stack.cols, m.n_ff_expert);
    EXPECT_EQ(m.down_stack.type, full.down_stack.type) << "whole blocks, not a conversion";
    if (m.has_shared_expert()) {
      EXPECT_EQ(m.shared_down.cols, m.shared_gate.rows);
    }
    channels += m.n_ff_expert;
    const std::vector<float> got = run(m);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += got[i];

    const auto det = Model::load(path, ShardRequest{2, rank, 1, 0, true});
    const MoeLayerWeights& d = det->weights().layers[size_t(layer)].moe;
    EXPECT_EQ(d.n_ff_expert, full.n_ff_expert);
    const RankSlice& me = det->shard().mine();
    ASSERT_EQ(d.n_out, me.n_embd());
    const std::vector<float> own = run(d);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < d.n_out; ++i) {
        const float a = own[size_t(t * d.n_out + i)], b = want[size_t(t * c.n_embd + me.embd_begin + i)];
        ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0) << path << " rank " << rank << " token " << t << " row " << i;
      }
    }
  }
  EXPECT_EQ(channels, full.n_ff_expert);
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(double(want[i])));
    worst = std::max(worst, std::fabs(double(sum[i]) - want[i]));
  }
  EXPECT_LT(worst, tolerance * scale + 1e-6) << path << ": the ranks' partial sums do not add up to the layer";
}

}  // namespace kestrel::test
