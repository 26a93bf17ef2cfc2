#include "runner/model_runner.h"

#include <new>

#include "core/error.h"

namespace kestrel {

ForwardBatch build_forward_batch(std::span<const SequenceChunk> chunks, int block_size) {
  ForwardBatch batch;
  int64_t total = 0;
  size_t max_blocks = 1;
  for (const SequenceChunk& c : chunks) {
    total += int64_t(c.tokens.size());
    max_blocks = std::max(max_blocks, c.block_table.size());
  }
  batch.max_blocks_per_seq = int32_t(max_blocks);
  batch.token_ids.reserve(size_t(total));
  batch.positions.reserve(size_t(total));
  batch.token_seq.reserve(size_t(total));
  batch.slot_mapping.reserve(size_t(total));
  batch.block_tables.assign(chunks.size() * max_blocks, -1);
  for (size_t s = 0; s < chunks.size(); ++s) {
    const SequenceChunk& c = chunks[s];
    const int64_t end = c.start_position + int64_t(c.tokens.size());
    if (end > int64_t(c.block_table.size()) * block_size) {
      fail("internal: sequence chunk ends at {} but its blocks hold {} tokens", end,
           c.block_table.size() * size_t(block_size));
    }
    std::copy(c.block_table.begin(), c.block_table.end(), batch.block_tables.begin() + std::ptrdiff_t(s * max_blocks));
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      const int64_t position = c.start_position + int64_t(i);
      if (c.logits_from >= 0 && int64_t(i) >= c.logits_from) {
        batch.logits_indices.push_back(int32_t(batch.token_ids.size()));
      }
      batch.token_ids.push_back(c.tokens[i]);
      batch.positions.push_back(int32_t(position));
      batch.token_seq.push_back(int32_t(s));
      batch.slot_mapping.push_back(int64_t(c.block_table[size_t(position / block_size)]) * block_size +
                                   position % block_size);
    }
  }
  return batch;
}

ModelRunner::ModelRunner(const Model& model, const RunnerConfig& config)
    : model_(model), config_(config), backend_(make_cpu_backend(config.num_threads)) {
  if (config.num_blocks <= 0) fail("the KV cache needs at least one block");
  const ModelConfig& c = model.config();
  const int64_t floats_per_layer = config.num_blocks * config.block_size * c.kv_width();
  kv_view_.block_size = config.block_size;
  kv_view_.num_blocks = config.num_blocks;
  try {
    for (int64_t il = 0; il < c.n_layer; ++il) {
      kv_memory_.emplace_back(new float[size_t(floats_per_layer)]);
      kv_memory_.emplace_back(new float[size_t(floats_per_layer)]);
      kv_view_.layers.push_back({kv_memory_[kv_memory_.size() - 2].get(), kv_memory_.back().get()});
    }
  } catch (const std::bad_alloc&) {
    fail("out of memory: the KV cache of {} blocks x {} tokens needs {:.1f} MiB; use fewer blocks "
         "or a shorter context",
         config.num_blocks, config.block_size,
         double(2 * c.n_layer * floats_per_layer * int64_t(sizeof(float))) / (1 << 20));
  }
}

int64_t ModelRunner::kv_bytes() const {
  return 2 * model_.config().n_layer * config_.num_blocks * config_.block_size *
         model_.config().kv_width() * int64_t(sizeof(float));
}

std::span<float> ModelRunner::execute(std::span<const SequenceChunk> chunks) {
  return execute(build_forward_batch(chunks, config_.block_size));
}

std::span<float> ModelRunner::execute(const ForwardBatch& batch) {
  for (int64_t slot : batch.slot_mapping) {
    if (slot < 0 || slot >= config_.num_blocks * config_.block_size) {
      fail("internal: KV slot {} outside the cache", slot);
    }
  }
  const int64_t n_vocab = model_.config().n_vocab;
  logits_.resize(batch.logits_indices.size() * size_t(n_vocab));
  model_.forward(*backend_, batch, kv_view_, scratch_, logits_.data());
  return std::span<float>(logits_);
}

}  // namespace kestrel
