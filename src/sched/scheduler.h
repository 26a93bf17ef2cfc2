// Token-budget scheduler in the style of vLLM v1. Each step hands tokens out of one budget
// (max_num_batched_tokens): first to running requests (a decode takes 1 token, an unfinished
// prefill takes the next chunk), then to waiting ones in (priority, arrival) order. A prompt longer
// than the remaining budget is prefilled in chunks over several steps (chunked prefill). When the
// KV pool runs dry, the lowest-priority, newest running request is preempted: its blocks are freed
// and it is recomputed later from its tokens.
//
// "Does it fit at all" (capacity, checked once at admission) is kept apart from "which tokens run
// this step" (schedule()).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "sched/request.h"

namespace kestrel {

enum class SchedulingPolicy {
  Continuous,  // admit and retire requests every step
  Static,      // admit a full batch only when nothing is running; run it to completion
};

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;
  int max_num_seqs = 64;
  int64_t max_model_len = 2048;
  SchedulingPolicy policy = SchedulingPolicy::Continuous;
  // Streaming (attention sinks over a rolling window of max_model_len): a sequence may run past
  // max_model_len; only max_tokens (and the int32 position range) ends it.
  bool streaming = false;
  // Logits rows a prompt-scoring request may ask for in one step (bounds the logits memory:
  // rows x vocabulary floats).
  int64_t max_prompt_logits = 512;
};

struct ScheduledRequest {
  Request* request = nullptr;
  int64_t num_computed_tokens = 0;   // position of the first scheduled token
  // Tokens computed this step: request->tokens from num_computed_tokens on, then the request's
  // num_draft_tokens draft tokens (the last ones).
  int64_t num_scheduled_tokens = 0;
  int64_t num_draft_tokens = 0;
  // Logits rows wanted, the last ones of the chunk: 0 mid-prefill; 1 + num_draft_tokens when the
  // chunk reaches the last known token (row i predicts the token after draft i).
  int64_t num_logits = 0;
  // A prompt-scoring request's rows for the chunk's positions before the prompt's last one (row i
  // predicts prompt token num_computed_tokens + i + 1); they come first, the num_logits rows last.
  int64_t num_prompt_logits = 0;

  bool samples() const { return num_logits > 0; }
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;
  int64_t num_scheduled_tokens = 0;
  std::vector<RequestId> preempted;
  std::vector<RequestId> admitted;  // moved from waiting to running this step
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KVCacheManager& kv);

  // Why a request can never run, or "" if it can: prompt empty or not shorter than the context,
  // prompt + max_tokens longer than the context (neither when streaming), or more blocks than the
  // whole pool.
  std::string check_capacity(int64_t num_prompt_tokens, int64_t max_tokens) const;
  // Queues a request; throws kestrel::Error with check_capacity's reason if it can never run.
  void add_request(std::unique_ptr<Request> request);

  SchedulerOutput schedule();
  // Applies a step's results. `accepted` has one entry per scheduled request, in order: the tokens
  // that request produced (empty without logits; else the accepted drafts, in order, then the
  // token sampled after them, so 1 to 1 + num_draft_tokens). Rejected drafts are rolled back
  // before anything reaches the prefix cache: num_computed_tokens counts only accepted positions,
  // blocks past the new end are freed, and only then are full blocks hashed. A request finishes
  // at the first stop token, at max_tokens or at the context limit, and tokens after that point
  // in an accepted run are dropped.
  void update_from_output(const SchedulerOutput& output, std::span<const std::vector<TokenId>> accepted);
  // Finishes a request now (stop string, abort, error): it leaves the queues and its blocks are
  // freed. Unknown or already finished ids are ignored.
  void finish_request(RequestId id, FinishReason reason);
  // Finished requests since the last call, removed from the scheduler.
  std::vector<std::unique_ptr<Request>> take_finished();
  // Ids of every request not yet finished (waiting or running).
  std::vector<RequestId> unfinished_ids() const;

  const Request* find(RequestId id) const;
  // How many drafts the request may have: each accepted draft and the token after them must fit
  // max_tokens and (unless streaming) the context.
  int64_t draft_limit(const Request& request) const;
  // Running requests (admission order), for the engine to attach drafts before schedule().
  const std::vector<Request*>& running() const { return running_; }
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const SchedulerConfig& config() const { return config_; }
  const KVCacheManager& kv() const { return kv_; }

 private:
  void enqueue_waiting(Request* request);
  bool waits_for_prefix_source(const Request& request) const;
  Request* pick_preemption_victim() const;
  void preempt(Request* request, SchedulerOutput& output);
  void retire(Request* request, FinishReason reason);

  SchedulerConfig config_;
  KVCacheManager& kv_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;   // sorted by (priority, arrival_order)
  std::vector<Request*> running_;  // in admission order
  std::vector<std::unique_ptr<Request>> finished_;
  uint64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace kestrel
