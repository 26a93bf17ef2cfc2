// The reference.json reader and the batch-logits check shared by the transformers-reference tests (hf_models_test.cpp,
// arch_fixtures_test.cpp, moe_fixtures_test.cpp): every prompt of a reference.json (scripts/gen_hf_fixtures.py's format)
// in ONE runner batch, each with its own block tables, against transformers' float32 logits of the
// positions it recorded. Tolerance 1e-4 * max|logit| + 1e-4 (the argument is in hf_models_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "runner/model_runner.h"
#include "test_paths.h"

namespace kestrel::test {

// The reference.json of the fixture folder `dir` (test data path), parsed once per process.
inline const nlohmann::json& fixture_reference(const std::string& dir) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(dir);
  if (it == cache.end()) {
    it = cache.emplace(dir, nlohmann::json::parse(read_file(test_data_path(dir) + "/reference.json"))).first;
  }
  return it->second;
}

// The prompts in ONE runner batch, each a sequence with its own block tables and F32 K/V (the
// model's math, not the cache's rounding): logits of positions logits_from[s].. of each prompt,
// rows in prompt order. context_length: the cache's (KvCacheSpec; 0: the model's training context).
inline std::vector<float> batch_logits(const Model& model, const std::vector<std::vector<TokenId>>& prompts,
                                       const std::vector<int64_t>& logits_from, int64_t context_length = 0) {
  const int block_size = 16;
  const KvLayout layout = model.kv_layout();
  int64_t blocks_per_seq = 0;
  for (const auto& p : prompts) {
    blocks_per_seq = std::max<int64_t>(blocks_per_seq, (int64_t(p.size()) + block_size - 1) / block_size);
  }
  RunnerConfig rc;
  rc.num_threads = 2;
  rc.kv = model.kv_spec(DType::F32, DType::F32, block_size);
  rc.kv.context_length = context_length;
  rc.group_blocks.assign(layout.group_windows.size(), blocks_per_seq * int64_t(prompts.size()));
  ModelRunner runner(model, rc);
  std::vector<std::vector<BlockId>> tables(prompts.size());
  std::vector<SequenceChunk> chunks;
  for (size_t s = 0; s < prompts.size(); ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(BlockId(int64_t(s) * blocks_per_seq + b));
    SequenceChunk chunk;
    chunk.tokens = prompts[s];
    chunk.start_position = 0;
    chunk.block_tables.assign(layout.group_windows.size(), std::span<const BlockId>(tables[s]));
    chunk.logits_from = logits_from[s];
    chunks.push_back(chunk);
  }
  const std::span<const float> logits = runner.execute(chunks);
  return std::vector<float>(logits.begin(), logits.end());
}

// Runs tokens 1, 2, 3 as one chunk (F32 K/V, one block) with `observer` watching the linear
// layers' inputs: for the tests that calibration refuses a model (MoE layers, act-order matrices).
inline void run_observed_chunk(const Model& model, ActivationObserver& observer) {
  RunnerConfig rc;
  rc.kv = model.kv_spec(DType::F32, DType::F32, 16);
  rc.group_blocks = {1};
  ModelRunner runner(model, rc);
  runner.set_activation_observer(&observer);
  const std::vector<TokenId> tokens = {1, 2, 3};
  const std::vector<BlockId> table = {0};
  SequenceChunk chunk;
  chunk.tokens = tokens;
  chunk.block_tables = {std::span<const BlockId>(table)};
  chunk.logits_from = 2;
  runner.execute(std::span<const SequenceChunk>(&chunk, 1));
}

// `reference` holds a "prompts" list (a reference.json, or a part of one with its own prompts).
// relative_tolerance: of max|logit| (1e-4 for float weights; a quantized model's integer kernels
// also round the activations to 8 bits, see prequantized_test.cpp).
inline void expect_batch_logits_match(const Model& model, const nlohmann::json& reference, const std::string& label,
                                      int64_t context_length = 0, double relative_tolerance = 1e-4) {
  const double kRelativeTolerance = relative_tolerance;
  constexpr double kAbsoluteTolerance = 1e-4;
  const nlohmann::json& prompts = reference["prompts"];
  std::vector<std::vector<TokenId>> tokens;
  std::vector<int64_t> logits_from;
  size_t expected_rows = 0;
  for (const nlohmann::json& p : prompts) {
    tokens.push_back(p["ids"].get<std::vector<TokenId>>());
    logits_from.push_back(p["logits_from"].get<int64_t>());
    expected_rows += tokens.back().size() - size_t(logits_from.back());
  }
  const std::vector<float> logits = batch_logits(model, tokens, logits_from, context_length);
  const size_t n_vocab = size_t(model.config().n_vocab);
  ASSERT_EQ(logits.size(), expected_rows * n_vocab);

  size_t row = 0;
  double worst_ratio = 0.0, worst_error = 0.0;
  for (size_t s = 0; s < prompts.size(); ++s) {
    const std::vector<float> expected = prompts[s]["logits"].get<std::vector<float>>();
    const double max_logit = prompts[s]["max_abs_logit"].get<double>();
    const double tolerance = kRelativeTolerance * max_logit + kAbsoluteTolerance;
    const size_t from = prompts[s]["logits_from"].get<size_t>();
    const size_t rows = tokens[s].size() - from;
    ASSERT_EQ(expected.size(), rows * n_vocab) << "prompt " << s;
    double max_error = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      const double error = std::fabs(double(logits[row * n_vocab + i]) - double(expected[i]));
      if (error > max_error) max_error = error, worst = i;
    }
    EXPECT_LE(max_error, tolerance) << label << " prompt " << s << " (" << tokens[s].size()
                                    << " tokens): position " << from + worst / n_vocab << ", token "
                                    << worst % n_vocab << ": kestrel " << logits[row * n_vocab + worst]
                                    << ", transformers " << expected[worst];
    worst_error = std::max(worst_error, max_error);
    worst_ratio = std::max(worst_ratio, max_error / max_logit);
    row += rows;
  }
  std::printf("[ %s ] max |logit error| %.3g = %.3g of max|logit|\n", label.c_str(), worst_error, worst_ratio);
}

}  // namespace kestrel::test
