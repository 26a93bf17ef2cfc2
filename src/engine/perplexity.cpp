#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace kestrel {

PerplexityResult compute_perplexity(const Model& model, std::span<const int32_t> tokens,
                                    const PerplexityOptions& o,
                                    const std::function<void(int64_t, double)>& on_chunk) {
  if (o.n_ctx < 4) fail("perplexity context must be at least 4 tokens, got {}", o.n_ctx);
  int64_t num_chunks = int64_t(tokens.size()) / o.n_ctx;
  if (o.max_chunks >= 0) num_chunks = std::min(num_chunks, o.max_chunks);
  if (num_chunks < 1) {
    fail("the text has {} tokens, fewer than one context of {} tokens", tokens.size(), o.n_ctx);
  }
  const int64_t seqs_per_batch = std::max<int64_t>(1, o.n_batch / o.n_ctx);
  const int block_size = 16;
  const int64_t blocks_per_seq = (o.n_ctx + block_size - 1) / block_size;

  RunnerConfig runner_config;
  runner_config.num_threads = o.num_threads;
  runner_config.block_size = block_size;
  const int num_groups = int(model.kv_layout().group_windows.size());
  runner_config.group_blocks.assign(size_t(num_groups), blocks_per_seq * seqs_per_batch);
  ModelRunner runner(model, runner_config);

  // Each sequence of a batch gets its own fixed range of blocks in every group; every chunk
  // starts afresh (a sliding group simply keeps the whole chunk: it is short).
  std::vector<std::vector<BlockId>> tables(static_cast<size_t>(seqs_per_batch));
  for (int64_t s = 0; s < seqs_per_batch; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[size_t(s)].push_back(BlockId(s * blocks_per_seq + b));
  }

  const int64_t first = o.n_ctx / 2;
  const int64_t n_vocab = model.config().n_vocab;
  PerplexityResult result;
  double nll = 0.0, nll2 = 0.0;
  std::vector<std::vector<int32_t>> chunk_tokens(static_cast<size_t>(seqs_per_batch));
  for (int64_t chunk = 0; chunk < num_chunks; chunk += seqs_per_batch) {
    const int64_t n_seq = std::min(seqs_per_batch, num_chunks - chunk);
    std::vector<SequenceChunk> chunks;
    for (int64_t s = 0; s < n_seq; ++s) {
      auto& ct = chunk_tokens[size_t(s)];
      const auto begin = tokens.begin() + std::ptrdiff_t((chunk + s) * o.n_ctx);
      ct.assign(begin, begin + std::ptrdiff_t(o.n_ctx));
      if (o.bos_token >= 0) ct[0] = o.bos_token;
      SequenceChunk c;
      c.tokens = ct;
      c.start_position = 0;
      c.block_tables.assign(size_t(num_groups), tables[size_t(s)]);
      c.logits_from = first;  // logits only where they are scored
      chunks.push_back(c);
    }
    const std::span<float> logits = runner.execute(chunks);
    // Logit row j of a chunk (token first + j) predicts token first + j + 1.
    const int64_t rows_per_seq = o.n_ctx - first;
    for (int64_t s = 0; s < n_seq; ++s) {
      const auto& ct = chunk_tokens[size_t(s)];
      for (int64_t j = 0; j + first + 1 < o.n_ctx; ++j) {
        const float* row = logits.data() + (s * rows_per_seq + j) * n_vocab;
        const float max_logit = *std::max_element(row, row + n_vocab);
        double sum = 0.0;
        for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(double(row[v] - max_logit));
        const double token_nll =
            -(double(row[ct[size_t(first + j + 1)]] - max_logit) - std::log(sum));
        nll += token_nll;
        nll2 += token_nll * token_nll;
        ++result.num_scored_tokens;
      }
      ++result.num_chunks;
      if (on_chunk) on_chunk(chunk + s, std::exp(nll / double(result.num_scored_tokens)));
    }
  }
  const double count = double(result.num_scored_tokens);
  result.mean_nll = nll / count;
  result.perplexity = std::exp(result.mean_nll);
  const double variance = nll2 / count - result.mean_nll * result.mean_nll;
  result.perplexity_error =
      variance > 0 && count > 1 ? std::sqrt(variance / (count - 1)) * result.perplexity : 0.0;
  return result;
}

}  // namespace kestrel
