// A request as the scheduler sees it: token counts and status, no phase flags. There is no
// prefill or decode phase: the scheduler computes tokens [num_computed_tokens, num_tokens()) in
// chunks, and a token is sampled whenever the computed count reaches the end.
//
// Speculative decoding: a request at the end of its tokens may carry draft tokens (proposed by a
// drafter, not yet part of `tokens`). The scheduler computes them in the same step as the last
// token, one logits row each plus one; update_from_output appends the accepted ones and rolls the
// rejected ones back.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace kestrel {

using TokenId = int32_t;

enum class RequestStatus { Waiting, Running, Preempted, Finished };

enum class FinishReason { None, Stop, Length, Abort, Error };

const char* finish_reason_name(FinishReason reason);

struct Request {
  RequestId id = 0;
  std::vector<TokenId> tokens;       // prompt followed by generated tokens
  int64_t num_prompt_tokens = 0;
  int64_t num_computed_tokens = 0;   // tokens whose K/V are in the cache
  // Tokens found in the prefix cache at first admission (vLLM's num_cached_tokens); -1 until then.
  // Kept apart from num_computed_tokens, which also counts what the admission step computed.
  int64_t num_cached_tokens = -1;
  int64_t max_tokens = 0;            // generated-token limit
  int priority = 0;                  // lower value runs first (vLLM convention); FCFS within one
  uint64_t arrival_order = 0;        // ties broken by arrival
  RequestStatus status = RequestStatus::Waiting;
  FinishReason finish_reason = FinishReason::None;
  int num_preemptions = 0;
  // Another request with the same prompt (n > 1 sampling): this one is admitted only after that
  // one's prompt is computed, so it shares the prompt's blocks through the prefix cache.
  RequestId prefix_source = 0;
  // Token ids that end the request (EOS and every end-of-turn token the tokenizer knows); empty:
  // generate until max_tokens.
  std::vector<TokenId> stop_tokens;
  bool ignore_eos = false;            // stop tokens do not end the request
  // Score the prompt: every prompt position gets a logits row as it is computed (the prefix
  // cache is not used for it, and chunks are capped at SchedulerConfig::max_prompt_logits).
  bool prompt_logprobs = false;
  // Drafts for the next step (set before schedule(); the scheduler may shorten them to what the
  // budget, max_tokens and the context allow; cleared by update_from_output).
  std::vector<TokenId> draft_tokens;
  int64_t num_draft_tokens = 0;      // drafts verified over the request's life
  int64_t num_accepted_tokens = 0;   // of which accepted

  bool is_stop_token(TokenId token) const {
    if (ignore_eos) return false;
    for (TokenId t : stop_tokens) {
      if (t == token) return true;
    }
    return false;
  }

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool finished() const { return status == RequestStatus::Finished; }
};

}  // namespace kestrel
