#include "engine/kv_capacity.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/memory_info.h"

namespace kestrel {
namespace {

// Activation memory a step of the config needs besides the weights and the KV cache (the forward
// pass's buffers for max_num_batched_tokens tokens, the matmul conversions and the logits).
int64_t scratch_bytes(const Model& model, const EngineConfig& config) {
  const ModelConfig& c = model.config();
  const int64_t tokens = config.max_num_batched_tokens;
  const int64_t per_token = 4 * c.n_embd + 2 * c.q_width() + 2 * c.kv_width() + 3 * c.n_ff +
                            mla_scratch_floats_per_token(c);
  return int64_t(sizeof(float)) * (tokens * per_token + int64_t(config.max_num_seqs) * c.n_vocab);
}

}  // namespace

KvCacheSpec make_kv_spec(const Model& model, const EngineConfig& config) {
  KvCacheSpec spec = model.kv_spec(config.kv_type_k, config.kv_type_v, config.block_size);
  spec.rotate = config.kv_rotate;
  spec.context_length = config.max_model_len > 0 ? config.max_model_len : model.config().n_ctx_train;
  if (config.attention_sinks >= 0) {
    spec.rolling_window = config.max_model_len > 0 ? config.max_model_len : model.config().n_ctx_train;
    spec.sink_tokens = config.attention_sinks;
    if (!config.free_out_of_window_blocks) {
      fail("--keep-window-blocks cannot be combined with --attention-sinks: the rolling window frees "
           "the blocks it leaves behind");
    }
  }
  validate_kv_spec(spec);
  return spec;
}

std::string describe(const KvCapacity& k) {
  std::string s = fmt::format("KV cache: {}, {} per token, {} tokens ({} blocks of {}) in {}", k.spec.describe(),
                              human_bytes(double(k.bytes_per_token)), k.tokens, k.tokens / k.spec.block_size,
                              k.spec.block_size, human_bytes(double(k.bytes)));
  if (k.spec.rolling_window > 0) {
    s += fmt::format(", rolling window {} with {} attention sinks", k.spec.rolling_window, k.spec.sink_tokens);
  }
  if (k.available_bytes > 0) {
    s += fmt::format(" ({:.2f} of {} available, less weights and scratch)", k.fraction,
                     human_bytes(double(k.available_bytes)));
  }
  return s;
}

int64_t streaming_sequence_blocks(int window, int sinks, int block_size, int64_t step_tokens) {
  const int64_t bs = block_size;
  return (sinks + bs - 1) / bs + (window - sinks - 1 + bs - 1) / bs + 1 + (step_tokens + bs - 1) / bs + 1;
}

std::vector<int64_t> resolve_kv_group_blocks(const Model& model, const EngineConfig& config,
                                             KvCapacity* capacity) {
  const KvCacheSpec spec = make_kv_spec(model, config);
  const KvLayout layout = model.kv_layout(spec.rolling_window, spec.sink_tokens);
  const int num_groups = int(layout.group_windows.size());
  const int bs = config.block_size;
  const int64_t max_model_len = config.max_model_len > 0 ? config.max_model_len : model.config().n_ctx_train;
  // Bytes one block takes in each group: K and V of that group's layers.
  std::vector<int64_t> block_bytes(size_t(num_groups), 0);
  for (int g : layout.layer_group) block_bytes[size_t(g)] += spec.block_bytes();
  // A windowed group never needs more than a window (and its sinks) per sequence plus a chunk in
  // flight.
  auto windowed = [&](int g) { return layout.group_windows[size_t(g)] > 0 && (config.free_out_of_window_blocks || layout.group_sinks[size_t(g)] > 0); };
  auto window_cap = [&](int g) {
    const int64_t per_seq = streaming_sequence_blocks(layout.group_windows[size_t(g)], layout.group_sinks[size_t(g)], bs, 0);
    return per_seq * config.max_num_seqs + (config.max_num_batched_tokens + bs - 1) / bs + 1;
  };
  std::vector<int64_t> blocks(size_t(num_groups), 0);
  int64_t budget = 0, available = 0;
  if (config.num_kv_blocks > 0) {
    for (int g = 0; g < num_groups; ++g) {
      blocks[size_t(g)] = windowed(g) ? std::min(config.num_kv_blocks, window_cap(g)) : config.num_kv_blocks;
    }
  } else {
    budget = config.kv_memory_bytes;
    int64_t full_cap = std::numeric_limits<int64_t>::max();
    if (budget <= 0) {
      if (!(config.kv_memory_fraction > 0.0 && config.kv_memory_fraction <= 1.0)) {
        fail("--kv-memory-fraction must be in (0, 1], got {}", config.kv_memory_fraction);
      }
      available = available_memory_bytes();
      // Mapped weights sit in the page cache, which the kernel counts as available; weights read
      // into memory are already out of it.
      const int64_t weights = model.weights_in_memory() ? 0 : model.weight_bytes();
      const int64_t spare = available - weights - scratch_bytes(model, config);
      budget = int64_t(config.kv_memory_fraction * double(std::max<int64_t>(0, spare)));
      // No more than max_num_seqs full contexts can use.
      full_cap = int64_t(config.max_num_seqs) * ((max_model_len + bs - 1) / bs) +
                 (config.max_num_batched_tokens + bs - 1) / bs;
      if (budget <= 0) {
        fail("no memory left for the KV cache: {} available, the weights take {} and the activations "
             "about {}; give --kv-memory-mib",
             human_bytes(double(available)), human_bytes(double(model.weight_bytes())),
             human_bytes(double(scratch_bytes(model, config))));
      }
    }
    // Windowed groups take what they can ever use (capped by an even split); full-attention
    // groups share the rest of the budget.
    int64_t all_bytes = 0;
    for (int64_t b : block_bytes) all_bytes += b;
    const int64_t even = budget / all_bytes;
    int64_t rest = budget;
    int64_t full_bytes = 0;
    for (int g = 0; g < num_groups; ++g) {
      if (windowed(g)) {
        blocks[size_t(g)] = std::min(even, window_cap(g));
        rest -= blocks[size_t(g)] * block_bytes[size_t(g)];
      } else {
        full_bytes += block_bytes[size_t(g)];  // shares the rest of the budget
      }
    }
    for (int g = 0; g < num_groups; ++g) {
      if (blocks[size_t(g)] == 0) blocks[size_t(g)] = std::min(rest / full_bytes, full_cap);
    }
    for (int g = 0; g < num_groups; ++g) {
      if (blocks[size_t(g)] < 1) {
        fail("a KV budget of {} holds no block of {} tokens ({} bytes each in group {})",
             human_bytes(double(budget)), bs, block_bytes[size_t(g)], g);
      }
    }
  }
  if (spec.rolling_window > 0) {
    // A streaming sequence must fit: its sinks, its window and a chunk in flight.
    for (int g = 0; g < num_groups; ++g) {
      if (layout.group_sinks[size_t(g)] == 0 && layout.group_windows[size_t(g)] != spec.rolling_window) continue;
      const int window = layout.group_windows[size_t(g)], sinks = layout.group_sinks[size_t(g)];
      const int64_t need = streaming_sequence_blocks(window, sinks, bs, config.max_num_batched_tokens);
      if (blocks[size_t(g)] < need) {
        fail("the KV cache holds {} blocks of {} tokens but one streaming sequence needs {} (a window of {} "
             "with {} attention sinks, and a step of {} tokens): give more KV memory or a smaller --ctx",
             blocks[size_t(g)], bs, need, window, sinks, config.max_num_batched_tokens);
      }
    }
  }
  if (capacity != nullptr) {
    capacity->spec = spec;
    capacity->bytes = 0;
    for (int g : layout.layer_group) capacity->bytes += blocks[size_t(g)] * spec.block_bytes();
    capacity->bytes_per_token = int64_t(layout.layer_group.size()) * spec.token_bytes();
    capacity->tokens = blocks[0] * bs;
    capacity->budget_bytes = budget;
    capacity->available_bytes = available;
    capacity->fraction = available > 0 ? config.kv_memory_fraction : 0.0;
  }
  return blocks;
}

int64_t kv_bytes_per_token(const Model& model, const EngineConfig& config) {
  return model.config().n_layer * make_kv_spec(model, config).token_bytes();
}

RunnerConfig make_runner_config(const Model& model, const EngineConfig& config, KvCapacity* capacity) {
  RunnerConfig r;
  r.num_threads = config.num_threads;
  r.kv = make_kv_spec(model, config);
  r.group_blocks = resolve_kv_group_blocks(model, config, capacity);
  r.parallel = config.parallel;
  return r;
}

std::vector<KVCacheGroupSpec> make_kv_groups(const Model& model, const RunnerConfig& runner, const EngineConfig& config) {
  const KvLayout layout = model.kv_layout(runner.kv.rolling_window, runner.kv.sink_tokens);
  std::vector<KVCacheGroupSpec> groups;
  for (size_t g = 0; g < layout.group_windows.size(); ++g) {
    const bool frees = config.free_out_of_window_blocks || layout.group_sinks[g] > 0;
    groups.push_back({int32_t(runner.group_blocks[g]), frees ? layout.group_windows[g] : 0,
                      frees ? layout.group_sinks[g] : 0});
  }
  return groups;
}

}  // namespace kestrel
