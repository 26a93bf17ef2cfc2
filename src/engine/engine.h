// LLMEngine: the step loop schedule -> run -> sample -> update over one model. Single-threaded;
// callers drive step() (the CLI) or run it on an engine thread (the server).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "sample/sampler.h"
#include "sched/scheduler.h"

namespace kestrel {

struct EngineConfig {
  int num_threads = 2;
  int block_size = 16;
  int64_t num_kv_blocks = 0;                 // per full-attention group; 0: what kv_memory_bytes holds
  // KV memory; 0: kv_memory_fraction of the memory available at start, less the weights and the
  // activation scratch, and no more than max_num_seqs full contexts need.
  int64_t kv_memory_bytes = int64_t(256) << 20;
  double kv_memory_fraction = 0.9;
  // K and V element types (core/kv_spec.h) and the Hadamard rotation of K and Q.
  DType kv_type_k = DType::F16;
  DType kv_type_v = DType::F16;
  bool kv_rotate = false;
  // Streaming (StreamingLLM) when >= 0: full-attention layers see the first attention_sinks
  // tokens plus the most recent ones, max_model_len in all, and a sequence may run past
  // max_model_len with bounded memory. -1: off (a sequence ends at max_model_len).
  int attention_sinks = -1;
  int64_t max_model_len = 0;                 // 0: the model's training context
  int max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  SchedulingPolicy policy = SchedulingPolicy::Continuous;
  bool enable_prefix_caching = true;
  // Sliding-window layers free the KV blocks that fall out of their window (off only to check
  // that freeing changes nothing).
  bool free_out_of_window_blocks = true;
};

struct RequestSpec {
  RequestId id = 0;  // 0: the engine assigns one
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  int priority = 0;
  bool ignore_eos = false;
  RequestId prefix_source = 0;  // a sibling with the same prompt (n > 1): share its prompt blocks
};

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

// What one step produced for one request.
struct RequestOutput {
  RequestId id = 0;
  std::vector<SampleResult> new_tokens;  // 0 or 1 per step (0 while a prompt is being prefilled)
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
};

struct StepStats {
  int64_t num_scheduled_tokens = 0;
  int64_t num_sequences = 0;
  int64_t num_preempted = 0;
  std::vector<RequestId> admitted;  // requests that left the waiting queue this step
};

class LLMEngine {
 public:
  LLMEngine(const Model& model, const EngineConfig& config, TokenId eos_token);

  // Queues a request; throws kestrel::Error if it can never fit (prompt longer than the context,
  // more KV blocks than the pool).
  RequestId add_request(RequestSpec spec);
  // Finishes a request (also mid-prefill); its blocks are freed at once.
  void abort_request(RequestId id) { finish_request(id, FinishReason::Abort); }
  void finish_request(RequestId id, FinishReason reason);
  // Finishes every unfinished request (after a failed step); returns their ids.
  std::vector<RequestId> finish_all(FinishReason reason);
  std::vector<RequestOutput> step();
  bool has_unfinished() const { return scheduler_.has_unfinished(); }

  const Scheduler& scheduler() const { return scheduler_; }
  const KVCacheManager& kv() const { return kv_; }
  const ModelRunner& runner() const { return runner_; }
  int64_t max_model_len() const { return scheduler_.config().max_model_len; }
  // The longest sequence one request can really have: the context, unless the KV pool holds
  // fewer tokens (streaming: the window, which a sequence may run past).
  int64_t max_request_tokens() const;
  const KvCapacity& kv_capacity() const { return kv_capacity_; }
  const StepStats& last_step() const { return last_step_; }

 private:
  const Model& model_;
  TokenId eos_token_;
  KvCapacity kv_capacity_;
  RunnerConfig runner_config_;
  KVCacheManager kv_;
  ModelRunner runner_;
  Scheduler scheduler_;
  std::unordered_map<RequestId, Sampler> samplers_;
  RequestId next_id_ = 1;
  StepStats last_step_;
};

// The KV cache description for the config: its types, rotation, block size, rolling window.
KvCacheSpec make_kv_spec(const Model& model, const EngineConfig& config);
// KV blocks per KV-cache group (Model::kv_layout) for the config: num_kv_blocks for every
// full-attention group if set, else what the KV budget holds (kv_memory_bytes, or a fraction of
// the machine's available memory); sliding-window groups get no more than their windows can ever
// use. `capacity`, if given, receives the figures.
std::vector<int64_t> resolve_kv_group_blocks(const Model& model, const EngineConfig& config,
                                             KvCapacity* capacity = nullptr);

}  // namespace kestrel
