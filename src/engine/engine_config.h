// EngineConfig: what an LLMEngine is built with (threads, KV cache size and types, scheduler
// limits). Its own header so the KV sizing (kv_capacity.h) and the engine share it.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "sched/scheduler.h"
#include "spec/spec_config.h"

namespace kestrel {

class ParallelContext;

struct EngineConfig {
  int num_threads = 2;
  // The group of ranks the model is split over (dist/parallel.h; not owned): this engine runs on
  // rank 0 and drives the others. Null: one process.
  ParallelContext* parallel = nullptr;
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
  // Structured output's jump-forward: the tokens a request's grammar forces next are attached as
  // one-hot drafts and verified in one forward pass (exact: the output is plain decoding's). Only
  // when the engine does not speculate otherwise.
  bool grammar_jump_forward = true;
  int grammar_max_forced_tokens = 16;
  int max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  SchedulingPolicy policy = SchedulingPolicy::Continuous;
  bool enable_prefix_caching = true;
  // Sliding-window layers free the KV blocks that fall out of their window (off only to check
  // that freeing changes nothing).
  bool free_out_of_window_blocks = true;
  // Speculative decoding (off by default).
  SpecConfig spec;
};

}  // namespace kestrel
