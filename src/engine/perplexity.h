// Perplexity the way llama.cpp's llama-perplexity computes it, so figures compare: the tokenized
// text (with BOS) is cut into non-overlapping chunks of n_ctx tokens; each chunk's first token is
// replaced by BOS; only the second half of each chunk is scored (each scored token has at least
// n_ctx/2 tokens of context). Several chunks run together as separate sequences of one batch.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "model/model.h"
#include "runner/model_runner.h"

namespace kestrel {

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 2048;   // tokens per forward call: n_batch / n_ctx chunks at a time
  int64_t max_chunks = -1;  // -1: every whole chunk of the text
  int num_threads = 2;
  int32_t bos_token = -1;   // -1: keep each chunk's first token
};

struct PerplexityResult {
  int64_t num_chunks = 0;
  int64_t num_scored_tokens = 0;
  double mean_nll = 0.0;
  double perplexity = 0.0;
  double perplexity_error = 0.0;  // llama.cpp's +/- estimate
};

// on_chunk(chunk_index, running perplexity) is called after each chunk, in order.
PerplexityResult compute_perplexity(const Model& model, std::span<const int32_t> tokens,
                                    const PerplexityOptions& options,
                                    const std::function<void(int64_t, double)>& on_chunk);

}  // namespace kestrel
