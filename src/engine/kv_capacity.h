// Sizing the KV cache: its description (types, rotation, rolling window) from an EngineConfig, the
// blocks of each KV-cache group from a memory budget or from the memory the machine has free, and
// the figures reported at start, by `kestrel info` and on /metrics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/kv_spec.h"
#include "engine/engine_config.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "runner/model_runner.h"

namespace kestrel {

// The KV cache as sized at start (for the start-up line, `kestrel info` and /metrics).
struct KvCapacity {
  KvCacheSpec spec;
  int64_t bytes = 0;            // the whole cache
  int64_t bytes_per_token = 0;  // K and V of one token over every layer
  int64_t tokens = 0;           // positions the cache holds across all sequences (full-attention group)
  int64_t budget_bytes = 0;     // the budget it was sized from (0 with an explicit block count)
  int64_t available_bytes = 0;  // memory available at start, when the budget came from it
  double fraction = 0.0;        // of that memory (kv_memory_fraction)
};
// "KV cache: f16, 18.00 KiB per token, 10912 tokens (682 blocks of 16) in 188.00 MiB (0.90 of
// 21.30 GiB available, less weights and scratch)".
std::string describe(const KvCapacity& capacity);

// Blocks one streaming sequence holds at most in a group with this window and sinks: the sinks'
// blocks, the blocks of the window's other positions (one more where they straddle a block
// boundary) and those of a step of `step_tokens` in flight.
int64_t streaming_sequence_blocks(int window, int sinks, int block_size, int64_t step_tokens);

// The KV cache description for the config: its types, rotation, block size, rolling window.
KvCacheSpec make_kv_spec(const Model& model, const EngineConfig& config);
// KV blocks per KV-cache group (Model::kv_layout) for the config: num_kv_blocks for every
// full-attention group if set, else what the KV budget holds (kv_memory_bytes, or a fraction of
// the machine's available memory); sliding-window groups get no more than their windows can ever
// use. `capacity`, if given, receives the figures.
std::vector<int64_t> resolve_kv_group_blocks(const Model& model, const EngineConfig& config,
                                             KvCapacity* capacity = nullptr);
// K and V bytes of one token over every layer of `model` with the config's KV types.
int64_t kv_bytes_per_token(const Model& model, const EngineConfig& config);
// The runner's configuration for `model` under the config: threads, KV description, blocks per
// group (resolve_kv_group_blocks, whose figures go to `capacity` if given).
RunnerConfig make_runner_config(const Model& model, const EngineConfig& config, KvCapacity* capacity = nullptr);
// The KV manager's groups for that runner: each group's blocks, and the window and sinks of the
// groups that free out-of-window blocks (all windowed groups unless the config keeps them;
// rolling windows with sinks always).
std::vector<KVCacheGroupSpec> make_kv_groups(const Model& model, const RunnerConfig& runner, const EngineConfig& config);

}  // namespace kestrel
