// AsyncEngine: runs an LLMEngine on its own thread. Any thread may submit or abort requests; each
// request's output arrives, token by token, on its RequestStream (text already detokenized and
// stop strings applied). Used by the HTTP server and the offline batch runner.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/metrics.h"
#include "engine/text_output.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

struct GeneratedToken {
  TokenId id = -1;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
};

// One message from the engine thread to a request's consumer.
struct GenerationEvent {
  std::string text;                     // newly final text
  std::vector<GeneratedToken> tokens;   // tokens generated since the last event
  // With GenerateRequest::prompt_logprobs, in the request's first event: every prompt token with
  // its logprob under the model given the tokens before it (the first one NaN: nothing predicts
  // it) and its top alternatives (sampling.top_logprobs of them).
  std::vector<GeneratedToken> prompt_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  std::string matched_stop;             // the stop string that ended the request, if any
  std::string error;                    // set with FinishReason::Error
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  int64_t draft_tokens = 0;           // speculative drafts verified for the request so far
  int64_t accepted_draft_tokens = 0;  // of which accepted
};

// The consumer's end of a request. Thread-safe.
class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }
  // Waits up to `timeout` for the next event; false if none came.
  bool next(GenerationEvent* event, std::chrono::milliseconds timeout);
  void push(GenerationEvent event);

 private:
  RequestId id_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<GenerationEvent> events_;
};

struct GenerateRequest {
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::vector<std::string> stop;
  int priority = 0;
  bool ignore_eos = false;
  RequestId prefix_source = 0;  // see RequestSpec
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // structured output (compile_grammar)
  bool prompt_logprobs = false;  // score the prompt (GenerationEvent::prompt_logprobs)
};

// Unavailable: the process group the model runs on has failed (fail-stop; dist/communicator.h).
enum class RejectReason { Invalid, QueueFull, Unavailable };

// A request refused at submission: it could never run (prompt too long...) or the queue is full.
class RequestRejected : public Error {
 public:
  RequestRejected(RejectReason reason, const std::string& message) : Error(message), reason_(reason) {}
  RejectReason reason() const { return reason_; }

 private:
  RejectReason reason_;
};

struct AsyncEngineConfig {
  EngineConfig engine;
  int64_t max_queued_requests = 256;  // waiting + not yet admitted; beyond it submit() rejects
  // Called on the engine thread once the model's process group has failed (a rank died or stopped
  // answering), after the requests in flight have ended with the error: the server stops.
  std::function<void()> on_group_failure;
};

class AsyncEngine {
 public:
  AsyncEngine(const Model& model, const Tokenizer& tokenizer, const AsyncEngineConfig& config);
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Throws RequestRejected if the request can never fit or the queue is full.
  std::shared_ptr<RequestStream> submit(const GenerateRequest& request);
  // Aborts a request (also mid-prefill); its blocks are freed at the engine's next step. Unknown
  // or finished ids are ignored.
  void abort(RequestId id);

  MetricsSnapshot metrics() const { return metrics_.snapshot(); }
  int64_t max_model_len() const { return max_model_len_; }
  // The longest sequence a request can have (LLMEngine::max_request_tokens), fixed at start.
  int64_t max_request_tokens() const { return max_request_tokens_; }
  // The KV cache as sized at start.
  const KvCapacity& kv_capacity() const { return kv_capacity_; }
  // Whether shared prefixes reuse KV blocks (off when asked, or when sliding-window layers free
  // their old blocks: KVCacheManager decides).
  bool prefix_caching() const { return prefix_caching_; }
  // Whether the engine speculates (fixed at construction).
  bool speculative() const { return speculative_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  // Compiles a structured-output constraint for this model (thread-safe; compiled grammars are
  // cached). The grammar compiler is built on first use: it indexes the whole vocabulary.
  // Throws kestrel::Error for a constraint that cannot be compiled.
  std::shared_ptr<const grammar::CompiledGrammar> compile_grammar(const grammar::Constraint& constraint);
  // Blocks until no request is queued or running (for tests and the batch runner).
  void wait_idle();
  // Why the model's process group failed, once it has: every later request is refused (503).
  std::optional<std::string> group_failure() const;

 private:
  struct Active {
    std::shared_ptr<RequestStream> stream;
    TextOutput text;
    bool logprobs = false;
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_prompt_tokens = 0;
    int64_t draft_tokens = 0;
    int64_t accepted_draft_tokens = 0;
    std::chrono::steady_clock::time_point arrival;
    std::chrono::steady_clock::time_point first_token;
    bool admitted = false;
  };
  struct Pending {
    RequestSpec spec;
    std::vector<std::string> stop;
    std::shared_ptr<RequestStream> stream;
    std::chrono::steady_clock::time_point arrival;
  };

  void loop();
  void admit(Pending pending);
  void process(const std::vector<RequestOutput>& outputs);
  void finish(RequestId id, Active& active, GenerationEvent event, FinishReason reason);
  void publish_gauges();

  const Tokenizer& tokenizer_;
  int32_t n_vocab_;
  std::once_flag grammar_once_;
  std::unique_ptr<grammar::GrammarCompiler> grammar_compiler_;
  LLMEngine engine_;
  int64_t max_model_len_;
  int64_t max_request_tokens_;
  KvCapacity kv_capacity_;
  bool prefix_caching_;  // fixed at construction, read without the engine thread
  bool speculative_;
  int64_t max_queued_;
  EngineMetrics metrics_;

  std::function<void()> on_group_failure_;
  mutable std::mutex failure_mutex_;
  std::optional<std::string> group_failure_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::vector<Pending> inbox_;
  std::vector<RequestId> aborts_;
  std::atomic<int64_t> num_waiting_{0};
  bool busy_ = false;
  bool stopping_ = false;
  RequestId next_id_ = 1;

  std::unordered_map<RequestId, Active> active_;  // engine thread only
  std::thread thread_;
};

}  // namespace kestrel
