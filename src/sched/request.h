// A request as the scheduler sees it: token counts and status, no phase flags. There is no
// prefill or decode phase: the scheduler computes tokens [num_computed_tokens, num_tokens()) in
// chunks, and a token is sampled whenever the computed count reaches the end.
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
  TokenId eos_token = -1;            // -1: generate until max_tokens
  bool ignore_eos = false;

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool finished() const { return status == RequestStatus::Finished; }
};

}  // namespace kestrel
