#include "runner/model_runner.h"

#include <new>

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {

ForwardBatch build_forward_batch(std::span<const SequenceChunk> chunks, int block_size, int num_groups) {
  ForwardBatch batch;
  int64_t total = 0;
  for (const SequenceChunk& c : chunks) {
    total += int64_t(c.tokens.size());
    if (int(c.block_tables.size()) != num_groups) {
      fail("internal: a sequence chunk has {} block tables for {} KV-cache groups", c.block_tables.size(), num_groups);
    }
  }
  batch.token_ids.reserve(size_t(total));
  batch.positions.reserve(size_t(total));
  batch.token_seq.reserve(size_t(total));
  batch.kv_groups.resize(size_t(num_groups));
  for (int g = 0; g < num_groups; ++g) {
    KvGroupBatch& group = batch.kv_groups[size_t(g)];
    size_t max_blocks = 1;
    for (const SequenceChunk& c : chunks) max_blocks = std::max(max_blocks, c.block_tables[size_t(g)].size());
    group.max_blocks_per_seq = int32_t(max_blocks);
    group.block_tables.assign(chunks.size() * max_blocks, -1);
    group.slot_mapping.reserve(size_t(total));
  }
  for (size_t s = 0; s < chunks.size(); ++s) {
    const SequenceChunk& c = chunks[s];
    const int64_t end = c.start_position + int64_t(c.tokens.size());
    for (int g = 0; g < num_groups; ++g) {
      const std::span<const BlockId> table = c.block_tables[size_t(g)];
      if (end > int64_t(table.size()) * block_size) {
        fail("internal: sequence chunk ends at {} but its blocks hold {} tokens", end,
             table.size() * size_t(block_size));
      }
      KvGroupBatch& group = batch.kv_groups[size_t(g)];
      std::copy(table.begin(), table.end(), group.block_tables.begin() + std::ptrdiff_t(s * size_t(group.max_blocks_per_seq)));
      for (int64_t position = c.start_position; position < end; ++position) {
        const BlockId block = table[size_t(position / block_size)];
        if (block < 0) fail("internal: position {} falls in a freed KV block", position);
        group.slot_mapping.push_back(int64_t(block) * block_size + position % block_size);
      }
    }
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      if (c.logits_from >= 0 && int64_t(i) >= c.logits_from) {
        batch.logits_indices.push_back(int32_t(batch.token_ids.size()));
      }
      batch.token_ids.push_back(c.tokens[i]);
      batch.positions.push_back(int32_t(c.start_position + int64_t(i)));
      batch.token_seq.push_back(int32_t(s));
    }
  }
  return batch;
}

ModelRunner::ModelRunner(const Model& model, const RunnerConfig& config, Backend* shared_backend)
    : model_(model),
      config_(config),
      own_backend_(shared_backend != nullptr ? nullptr : make_cpu_backend(config.num_threads)),
      backend_(shared_backend != nullptr ? shared_backend : own_backend_.get()) {
  const ModelConfig& c = model.config();
  KvCacheSpec spec = config.kv;
  spec.n_kv_head = c.n_head_kv;
  spec.head_dim = c.head_dim;
  validate_kv_spec(spec);
  const KvLayout layout = model.kv_layout(spec.rolling_window, spec.sink_tokens);
  if (config.group_blocks.size() != layout.group_windows.size()) {
    fail("internal: {} KV block counts for a model with {} KV-cache groups", config.group_blocks.size(),
         layout.group_windows.size());
  }
  for (int64_t blocks : config.group_blocks) {
    if (blocks <= 0) fail("the KV cache needs at least one block per group");
  }
  kv_view_.spec = spec;
  kv_view_.layout = layout;
  kv_view_.num_blocks = config.group_blocks;
  const int64_t k_layer_block = spec.block_size * spec.n_kv_head * spec.k_row_bytes();
  const int64_t v_layer_block = spec.block_size * spec.n_kv_head * spec.v_row_bytes();
  try {
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const int64_t blocks = config.group_blocks[size_t(layout.layer_group[size_t(il)])];
      // Never touched here: pages are only faulted in as blocks are first written.
      kv_memory_.emplace_back(size_t(blocks * k_layer_block));
      kv_memory_.emplace_back(size_t(blocks * v_layer_block));
      KvLayerView view;
      view.k_type = spec.k_type;
      view.v_type = spec.v_type;
      view.k = kv_memory_[kv_memory_.size() - 2].data();
      view.v = kv_memory_.back().data();
      view.num_slots = blocks * spec.block_size;
      view.n_kv_head = int(spec.n_kv_head);
      view.k_row_bytes = spec.k_row_bytes();
      view.v_row_bytes = spec.v_row_bytes();
      kv_view_.layers.push_back(view);
    }
  } catch (const std::bad_alloc&) {
    fail("out of memory: the KV cache ({} blocks of {} tokens per group, {}) needs {:.1f} MiB; use "
         "fewer blocks, a smaller KV type or a shorter context",
         fmt::join(config.group_blocks, "/"), spec.block_size, spec.describe(),
         double(kv_bytes_for(model, spec, config.group_blocks)) / (1 << 20));
  }
}

int64_t kv_bytes_for(const Model& model, const KvCacheSpec& spec, std::span<const int64_t> group_blocks) {
  const KvLayout layout = model.kv_layout(spec.rolling_window, spec.sink_tokens);
  int64_t bytes = 0;
  for (int g : layout.layer_group) bytes += group_blocks[size_t(g)] * spec.block_bytes();
  return bytes;
}

int64_t ModelRunner::kv_bytes() const { return kv_bytes_for(model_, kv_view_.spec, config_.group_blocks); }

std::span<float> ModelRunner::execute(std::span<const SequenceChunk> chunks) {
  return execute(build_forward_batch(chunks, block_size(), num_groups()));
}

std::span<float> ModelRunner::execute(const ForwardBatch& batch) {
  for (size_t g = 0; g < batch.kv_groups.size(); ++g) {
    for (int64_t slot : batch.kv_groups[g].slot_mapping) {
      if (slot < 0 || slot >= kv_view_.num_blocks[g] * block_size()) {
        fail("internal: KV slot {} outside the cache", slot);
      }
    }
  }
  const int64_t n_vocab = model_.config().n_vocab;
  logits_.resize(batch.logits_indices.size() * size_t(n_vocab));
  model_.forward(*backend_, batch, kv_view_, scratch_, logits_.data(), observer_);
  return std::span<float>(logits_);
}

}  // namespace kestrel
