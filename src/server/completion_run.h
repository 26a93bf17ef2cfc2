// CompletionRun: the engine requests behind one API call (prompts x n choices). Submitting
// rejects the whole call if any part is refused; destroying the run aborts whatever is unfinished
// (a client that went away frees its KV blocks at the engine's next step).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "engine/async_engine.h"
#include "server/openai_request.h"

namespace kestrel::server {

// Compiles the request's structured-output constraint (if any) into request.grammar. JSON may
// hold free whitespace unless the request or `json_any_whitespace` says otherwise. Throws
// ApiError(400) naming the field for a constraint that cannot be compiled or ignore_eos with one.
void prepare_constraint(AsyncEngine& engine, ParsedRequest& request, bool json_any_whitespace);

class CompletionRun {
 public:
  // Throws ApiError: 400 if a prompt can never fit, 503 if the queue is full.
  CompletionRun(AsyncEngine& engine, const ParsedRequest& request);
  ~CompletionRun();
  CompletionRun(const CompletionRun&) = delete;
  CompletionRun& operator=(const CompletionRun&) = delete;

  // Waits up to `timeout` for progress and hands each event to on_event(choice, event). Returns
  // true once every choice has finished.
  bool pump(std::chrono::milliseconds timeout,
            const std::function<void(int, GenerationEvent&)>& on_event);
  int num_choices() const { return int(streams_.size()); }
  int64_t prompt_tokens() const { return prompt_tokens_; }

 private:
  AsyncEngine& engine_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<bool> finished_;
  int64_t prompt_tokens_ = 0;
};

}  // namespace kestrel::server
