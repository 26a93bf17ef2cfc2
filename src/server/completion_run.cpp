#include "server/completion_run.h"

#include <random>

#include <fmt/format.h>

#include "grammar/grammar_matcher.h"
#include "server/api_error.h"

namespace kestrel::server {

void prepare_constraint(AsyncEngine& engine, ParsedRequest& request, bool json_any_whitespace) {
  if (request.structured.tool_choice == ToolChoice::Auto) {
    // Calls the model writes outside a constrained block are checked against their schema.
    request.structured.arguments_match = [&engine](const ToolFunction& f, const std::string& arguments) {
      grammar::Constraint schema;
      schema.kind = grammar::ConstraintKind::JsonSchema;
      schema.text = f.parameters.dump();
      schema.max_whitespace = 0;  // unbounded (the arguments are re-serialised compactly anyway)
      schema.any_order = true;    // and with their keys sorted
      const nlohmann::json parsed = nlohmann::json::parse(arguments, nullptr, false);
      if (parsed.is_discarded() || !required_present(f.parameters, parsed)) return false;
      try {
        return grammar::grammar_accepts(*engine.compile_grammar(schema), arguments);
      } catch (const Error&) {
        return false;
      }
    };
  }
  auto& constraint = request.structured.constraint;
  if (!constraint) return;
  constraint->any_whitespace = request.structured.any_whitespace.value_or(json_any_whitespace);
  if (request.ignore_eos) {
    throw ApiError(400, "'ignore_eos' cannot be combined with structured output (nothing may follow a complete output)",
                   "invalid_request_error", "ignore_eos");
  }
  try {
    request.grammar = engine.compile_grammar(*constraint);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "invalid_request_error", request.structured.constraint_param);
  }
}

CompletionRun::CompletionRun(AsyncEngine& engine, const ParsedRequest& r) : engine_(engine) {
  std::random_device entropy;
  try {
    for (const auto& prompt : r.prompts) {
      prompt_tokens_ += int64_t(prompt.size());
      RequestId first_choice = 0;
      for (int j = 0; j < r.n; ++j) {
        GenerateRequest g;
        g.prompt = prompt;
        g.sampling = r.sampling;
        g.sampling.top_logprobs = r.top_logprobs;
        // Choice j of a seeded request uses seed + j: reproducible, yet the choices differ.
        g.sampling.seed = r.seeded ? r.sampling.seed + uint64_t(j)
                                   : (uint64_t(entropy()) << 32 | uint64_t(entropy()));
        // max_tokens 0 (scoring a prompt with echo): one token is generated and left out of the answer.
        g.max_tokens = r.max_tokens >= 0 ? std::max<int64_t>(1, r.max_tokens)
                                         : std::max<int64_t>(1, engine.max_request_tokens() - int64_t(prompt.size()));
        g.prompt_logprobs = r.prompt_logprobs;
        g.stop = r.stop;
        g.priority = r.priority;
        g.ignore_eos = r.ignore_eos;
        g.grammar = r.grammar;
        g.prefix_source = first_choice;  // choices after the first share the prompt's blocks
        streams_.push_back(engine.submit(g));
        finished_.push_back(false);
        if (j == 0) first_choice = streams_.back()->id();
      }
    }
  } catch (const RequestRejected& e) {
    for (const auto& s : streams_) engine_.abort(s->id());
    streams_.clear();
    if (e.reason() == RejectReason::QueueFull) {
      throw ApiError(503, std::string("the server is overloaded: ") + e.what(), "server_overloaded");
    }
    if (e.reason() == RejectReason::Unavailable) throw ApiError(503, e.what(), "server_unavailable");
    throw ApiError(400, e.what(), "invalid_request_error", "", "context_length_exceeded");
  }
}

CompletionRun::~CompletionRun() {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (!finished_[i]) engine_.abort(streams_[i]->id());
  }
}

bool CompletionRun::pump(std::chrono::milliseconds timeout,
                         const std::function<void(int, GenerationEvent&)>& on_event) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool delivered = false;
    bool all_done = true;
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (finished_[i]) continue;
      GenerationEvent event;
      while (!finished_[i] && streams_[i]->next(&event, std::chrono::milliseconds(0))) {
        delivered = true;
        finished_[i] = event.finished;
        on_event(int(i), event);
      }
      all_done = all_done && finished_[i];
    }
    if (all_done) return true;
    if (delivered || std::chrono::steady_clock::now() >= deadline) return false;
    // Sleep on the first unfinished stream; with several choices wake often to serve the others.
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (finished_[i]) continue;
      GenerationEvent event;
      const auto wait = streams_.size() == 1 ? timeout : std::chrono::milliseconds(5);
      if (streams_[i]->next(&event, wait)) {
        finished_[i] = event.finished;
        on_event(int(i), event);
      }
      break;
    }
  }
}

}  // namespace kestrel::server
