// LLMEngine: the step loop (attach drafts ->) schedule -> run -> sample or verify -> update over one
// model. Single-threaded; callers drive step() (the CLI) or run it on an engine thread (the server).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_config.h"
#include "engine/kv_capacity.h"
#include "engine/speculator.h"
#include "core/background_task.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "sample/sampler.h"
#include "sched/scheduler.h"

namespace kestrel {

struct RequestSpec {
  RequestId id = 0;  // 0: the engine assigns one
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  int priority = 0;
  bool ignore_eos = false;
  RequestId prefix_source = 0;  // a sibling with the same prompt (n > 1): share its prompt blocks
  bool speculate = true;        // drafts when the engine speculates (false: plain decoding)
  // Structured output: the output must match this grammar (grammar::GrammarCompiler::compile);
  // null: unconstrained. Its token mask runs in the request's processor chain.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // Score the prompt (RequestOutput::prompt_logprobs), with sampling.top_logprobs alternatives.
  bool prompt_logprobs = false;
};

// What one step produced for one request.
struct RequestOutput {
  RequestId id = 0;
  // 0 while a prompt is being prefilled, else 1 and, under speculation, one more per accepted
  // draft (none past a stop token or the length limit).
  std::vector<SampleResult> new_tokens;
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  std::string error;  // FinishReason::Error: why (e.g. the request's grammar reached a dead end)
  // With RequestSpec::prompt_logprobs, in the output that brings the first new token: each prompt
  // token's logprob given the tokens before it (raw logits, as generated tokens' logprobs), the
  // first one NaN.
  std::vector<SampleResult> prompt_logprobs;
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
  int64_t num_draft_tokens = 0;     // drafts verified for this request so far
  int64_t num_accepted_tokens = 0;  // of which accepted
};

struct StepStats {
  int64_t num_scheduled_tokens = 0;
  int64_t num_sequences = 0;
  int64_t num_preempted = 0;
  std::vector<RequestId> admitted;  // requests that left the waiting queue this step
};

class LLMEngine {
 public:
  // A request stops at any of `stop_tokens` (Tokenizer::stop_token_ids(): EOS and every
  // end-of-turn token) unless it ignores EOS.
  LLMEngine(const Model& model, const EngineConfig& config, std::vector<TokenId> stop_tokens);
  ~LLMEngine();

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
  // Speculative decoding, if configured (nullptr otherwise).
  const Speculator* speculator() const { return speculator_.get(); }

 private:
  struct RequestState {
    Sampler sampler;
    bool speculate = true;
    grammar::GrammarMaskProcessor* grammar = nullptr;  // in the sampler's chain, if any
    // Prompt scoring: the prompt tokens scored so far (a recompute after preemption scores
    // nothing twice); handed out with the first new token.
    std::vector<SampleResult> prompt_logprobs;
    bool scores_prompt = false;
  };
  // A prompt-scoring request's rows for positions before its last prompt token.
  void score_prompt(const ScheduledRequest& s, std::span<const float> rows);
  // Jump-forward: the grammar-forced tokens of decoding requests as one-hot drafts.
  void attach_forced_drafts();
  // Logits rows [num_logits][n_vocab] of one scheduled request -> the tokens it produced.
  std::vector<TokenId> produce(const ScheduledRequest& s, std::span<float> rows, std::vector<SampleResult>* samples);

  const Model& model_;
  std::vector<TokenId> stop_tokens_;
  KvCapacity kv_capacity_;
  RunnerConfig runner_config_;
  KVCacheManager kv_;
  ModelRunner runner_;
  Scheduler scheduler_;
  std::unordered_map<RequestId, RequestState> states_;
  std::unique_ptr<Speculator> speculator_;
  RequestId next_id_ = 1;
  StepStats last_step_;
  bool jump_forward_;
  int max_forced_tokens_;
  // The next-token grammar masks of a step's constrained requests, computed while its forward
  // pass runs (they depend only on the tokens so far).
  BackgroundTask mask_prefetch_;
};

}  // namespace kestrel
