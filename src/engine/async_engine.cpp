#include "engine/async_engine.h"

#include <fmt/format.h>

namespace kestrel {

using Clock = std::chrono::steady_clock;

bool RequestStream::next(GenerationEvent* event, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *event = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestStream::push(GenerationEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

AsyncEngine::AsyncEngine(const Model& model, const Tokenizer& tokenizer, const AsyncEngineConfig& config)
    : tokenizer_(tokenizer),
      n_vocab_(model.config().n_vocab),
      engine_(model, config.engine, tokenizer.stop_token_ids()),
      max_model_len_(engine_.max_model_len()),
      max_request_tokens_(engine_.max_request_tokens()),
      kv_capacity_(engine_.kv_capacity()),
      prefix_caching_(engine_.kv().prefix_caching()),
      speculative_(engine_.speculator() != nullptr),
      max_queued_(config.max_queued_requests),
      on_group_failure_(config.on_group_failure) {
  publish_gauges();
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<const grammar::CompiledGrammar> AsyncEngine::compile_grammar(const grammar::Constraint& constraint) {
  std::call_once(grammar_once_, [this] {
    grammar_compiler_ = std::make_unique<grammar::GrammarCompiler>(tokenizer_, n_vocab_, tokenizer_.stop_token_ids());
  });
  return grammar_compiler_->compile(constraint);
}

std::optional<std::string> AsyncEngine::group_failure() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return group_failure_;
}

std::shared_ptr<RequestStream> AsyncEngine::submit(const GenerateRequest& request) {
  if (const std::optional<std::string> failure = group_failure()) {
    throw RequestRejected(RejectReason::Unavailable, "the model's process group has failed: " + *failure);
  }
  // The capacity check reads only the immutable limits, so it is safe from any thread.
  const std::string problem =
      engine_.scheduler().check_capacity(int64_t(request.prompt.size()), request.max_tokens);
  if (!problem.empty()) {
    metrics_.update([](MetricsSnapshot& m) { ++m.requests_rejected; });
    throw RequestRejected(RejectReason::Invalid, problem);
  }
  for (TokenId t : request.prompt) {
    if (t < 0 || t >= tokenizer_.vocab_size()) {
      throw RequestRejected(RejectReason::Invalid,
                            fmt::format("token id {} is outside the vocabulary (size {})", t,
                                        tokenizer_.vocab_size()));
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (int64_t(inbox_.size()) + num_waiting_.load() >= max_queued_) {
    metrics_.update([](MetricsSnapshot& m) { ++m.requests_rejected; });
    throw RequestRejected(RejectReason::QueueFull,
                          fmt::format("the queue is full ({} requests waiting)", max_queued_));
  }
  Pending pending;
  pending.spec.id = next_id_++;
  pending.spec.prompt = request.prompt;
  pending.spec.sampling = request.sampling;
  pending.spec.max_tokens = request.max_tokens;
  pending.spec.priority = request.priority;
  pending.spec.ignore_eos = request.ignore_eos;
  pending.spec.prefix_source = request.prefix_source;
  pending.spec.grammar = request.grammar;
  pending.spec.prompt_logprobs = request.prompt_logprobs;
  pending.stop = request.stop;
  pending.stream = std::make_shared<RequestStream>(pending.spec.id);
  pending.arrival = Clock::now();
  auto stream = pending.stream;
  inbox_.push_back(std::move(pending));
  busy_ = true;
  wake_.notify_all();
  return stream;
}

void AsyncEngine::abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborts_.push_back(id);
  }
  wake_.notify_all();
}

void AsyncEngine::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return !busy_; });
}

void AsyncEngine::admit(Pending pending) {
  const RequestId id = pending.spec.id;
  const TokenId last_prompt = pending.spec.prompt.back();
  const int64_t prompt_tokens = int64_t(pending.spec.prompt.size());
  const bool logprobs = pending.spec.sampling.top_logprobs >= 0;
  try {
    engine_.add_request(std::move(pending.spec));
  } catch (const Error& e) {
    GenerationEvent event;
    event.finished = true;
    event.finish_reason = FinishReason::Error;
    event.error = e.what();
    pending.stream->push(std::move(event));
    metrics_.update([](MetricsSnapshot& m) { ++m.requests_error; });
    return;
  }
  Active active{pending.stream, TextOutput(tokenizer_, last_prompt, std::move(pending.stop)),
                logprobs,        prompt_tokens, 0, 0, 0, 0, pending.arrival, {}, false};
  active_.emplace(id, std::move(active));
}

void AsyncEngine::finish(RequestId id, Active& active, GenerationEvent event, FinishReason reason) {
  event.finished = true;
  event.finish_reason = reason;
  event.prompt_tokens = active.prompt_tokens;
  event.completion_tokens = active.completion_tokens;
  event.cached_prompt_tokens = active.cached_prompt_tokens;
  event.draft_tokens = active.draft_tokens;
  event.accepted_draft_tokens = active.accepted_draft_tokens;
  const auto now = Clock::now();
  metrics_.update([&](MetricsSnapshot& m) {
    m.e2e_latency.observe(std::chrono::duration<double>(now - active.arrival).count());
    if (active.completion_tokens > 1) {
      m.time_per_output_token.observe(std::chrono::duration<double>(now - active.first_token).count() /
                                      double(active.completion_tokens - 1));
    }
    switch (reason) {
      case FinishReason::Stop: ++m.requests_stop; break;
      case FinishReason::Length: ++m.requests_length; break;
      case FinishReason::Abort: ++m.requests_abort; break;
      default: ++m.requests_error; break;
    }
  });
  active.stream->push(std::move(event));
  active_.erase(id);
}

void AsyncEngine::process(const std::vector<RequestOutput>& outputs) {
  const auto now = Clock::now();
  int64_t generated = 0;
  for (const RequestOutput& out : outputs) {
    const auto it = active_.find(out.id);
    if (it == active_.end()) continue;
    Active& active = it->second;
    // From the output, not the scheduler: a request may finish in the step that admitted it.
    active.cached_prompt_tokens = out.num_cached_tokens;
    active.draft_tokens = out.num_draft_tokens;
    active.accepted_draft_tokens = out.num_accepted_tokens;
    GenerationEvent event;
    for (const SampleResult& scored : out.prompt_logprobs) {
      event.prompt_logprobs.push_back({scored.token, scored.logprob, scored.top_logprobs});
    }
    event.draft_tokens = active.draft_tokens;
    event.accepted_draft_tokens = active.accepted_draft_tokens;
    for (const SampleResult& sample : out.new_tokens) {
      // A stop string inside an accepted run of drafts ends the output there.
      if (active.text.stopped()) break;
      if (active.completion_tokens++ == 0) {
        active.first_token = now;
        metrics_.update([&](MetricsSnapshot& m) {
          m.time_to_first_token.observe(std::chrono::duration<double>(now - active.arrival).count());
        });
      }
      ++generated;
      GeneratedToken token{sample.token, sample.logprob, {}};
      if (active.logprobs) token.top_logprobs = sample.top_logprobs;
      event.tokens.push_back(std::move(token));
      event.text += active.text.push(sample.token);
    }
    event.completion_tokens = active.completion_tokens;
    event.prompt_tokens = active.prompt_tokens;
    if (active.text.stopped()) {
      event.matched_stop = active.text.matched_stop();
      if (!out.finished) engine_.finish_request(out.id, FinishReason::Stop);
      finish(out.id, active, std::move(event), FinishReason::Stop);
    } else if (out.finished) {
      event.text += active.text.finish();
      event.error = out.error;
      finish(out.id, active, std::move(event), out.finish_reason);
    } else {
      active.stream->push(std::move(event));
    }
  }
  metrics_.update([&](MetricsSnapshot& m) { m.generation_tokens += generated; });
}

void AsyncEngine::publish_gauges() {
  const Scheduler& s = engine_.scheduler();
  const KVCacheManager& kv = engine_.kv();
  num_waiting_.store(int64_t(s.num_waiting()));
  metrics_.update([&](MetricsSnapshot& m) {
    m.num_running = int64_t(s.num_running());
    m.num_waiting = int64_t(s.num_waiting());
    m.kv_blocks_used = kv.num_used_blocks();
    m.kv_blocks_total = kv.num_blocks();
    m.kv_blocks_cached = kv.num_cached_blocks();
    m.kv_k_type = std::string(kv_type_name(kv_capacity_.spec.k_type));
    m.kv_v_type = std::string(kv_type_name(kv_capacity_.spec.v_type));
    m.kv_bytes = kv_capacity_.bytes;
    m.kv_bytes_per_token = kv_capacity_.bytes_per_token;
    m.kv_capacity_tokens = kv_capacity_.tokens;
    m.preemptions = s.num_preemptions();
    m.prefix_query_tokens = kv.prefix_query_tokens();
    m.prefix_hit_tokens = kv.prefix_hit_tokens();
    if (const Speculator* spec = engine_.speculator()) {
      const SpecStats& st = spec->stats();
      m.speculative = true;
      m.spec_num_drafts = st.num_drafts;
      m.spec_num_draft_tokens = st.num_draft_tokens;
      m.spec_num_accepted_tokens = st.num_accepted_tokens;
      m.spec_num_catch_up_tokens = st.num_catch_up_tokens;
      m.spec_accepted_per_position = st.accepted_per_position;
    }
  });
}

void AsyncEngine::loop() {
  for (;;) {
    std::vector<Pending> arrivals;
    std::vector<RequestId> aborts;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!engine_.has_unfinished() && inbox_.empty() && aborts_.empty()) {
        busy_ = false;
        idle_.notify_all();
        wake_.wait(lock, [&] { return stopping_ || !inbox_.empty() || !aborts_.empty(); });
      }
      if (stopping_) break;
      busy_ = true;
      arrivals.swap(inbox_);
      aborts.swap(aborts_);
    }
    for (RequestId id : aborts) {
      const auto it = active_.find(id);
      if (it == active_.end()) continue;
      engine_.abort_request(id);
      finish(id, it->second, GenerationEvent{}, FinishReason::Abort);
    }
    for (Pending& p : arrivals) admit(std::move(p));
    if (!engine_.has_unfinished()) {
      publish_gauges();
      continue;
    }
    try {
      const std::vector<RequestOutput> outputs = engine_.step();
      const auto now = Clock::now();
      for (RequestId id : engine_.last_step().admitted) {
        const auto it = active_.find(id);
        if (it == active_.end() || it->second.admitted) continue;
        it->second.admitted = true;
        metrics_.update([&](MetricsSnapshot& m) {
          m.queue_time.observe(std::chrono::duration<double>(now - it->second.arrival).count());
          m.prompt_tokens += it->second.prompt_tokens;
        });
      }
      process(outputs);
    } catch (const std::exception& e) {
      // A failed step (out of memory, a kernel error) fails the requests in flight, not the server.
      for (RequestId id : engine_.finish_all(FinishReason::Error)) {
        const auto it = active_.find(id);
        if (it == active_.end()) continue;
        GenerationEvent event;
        event.error = e.what();
        finish(id, it->second, std::move(event), FinishReason::Error);
      }
      // A broken process group cannot compute again: refuse what comes, and tell the server.
      if (dynamic_cast<const GroupFailure*>(&e) != nullptr) {
        {
          std::lock_guard<std::mutex> lock(failure_mutex_);
          group_failure_ = e.what();
        }
        if (on_group_failure_) on_group_failure_();
      }
    }
    publish_gauges();
  }
  // Shutting down: tell every consumer.
  for (auto& [id, active] : active_) {
    GenerationEvent event;
    event.finished = true;
    event.finish_reason = FinishReason::Abort;
    active.stream->push(std::move(event));
  }
  active_.clear();
}

}  // namespace kestrel
