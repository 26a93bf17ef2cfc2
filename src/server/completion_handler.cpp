#include "server/completion_handler.h"

#include <chrono>
#include <ctime>
#include <random>

#include <fmt/format.h>

#include "core/utf8.h"
#include "server/completion_run.h"
#include "server/openai_response.h"
#include "server/tool_call_stream.h"
#include "server/tool_calls.h"

namespace kestrel::server {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// How often a waiting handler looks at its client and at shutdown's deadline.
constexpr auto kPoll = 200ms;
// A stream silent this long sends an SSE comment (proxies keep the connection; a client that left
// is noticed by the write).
constexpr auto kHeartbeat = 1000ms;

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}", prefix, rng());
}

const ApiError kShuttingDown(503, "the server is shutting down; the request was ended before it finished",
                             "server_shutdown", "", "server_shutting_down");

// A choice's tokens as the response lists them: with echo and prompt logprobs, the prompt's tokens
// first (the first one without a logprob: nothing predicts it), unless max_tokens was 0.
std::vector<GeneratedToken> listed_tokens(const ParsedRequest& r, const GenerationEvent& first,
                                          std::vector<GeneratedToken> generated) {
  if (!r.prompt_logprobs) return generated;
  std::vector<GeneratedToken> all = first.prompt_logprobs;
  all.insert(all.end(), std::make_move_iterator(generated.begin()), std::make_move_iterator(generated.end()));
  return all;
}

class CompletionResponder {
 public:
  CompletionResponder(const CompletionContext& c, ResponseStream& out, std::shared_ptr<CompletionRun> run,
                      const ParsedRequest& request)
      : c_(c), out_(out), run_(std::move(run)), r_(request) {}

  void stream();
  void respond_whole();

 private:
  bool send(const json& chunk) { return out_.write_chunk("data: " + dump_json(chunk) + "\n\n"); }

  const CompletionContext& c_;
  ResponseStream& out_;
  std::shared_ptr<CompletionRun> run_;
  const ParsedRequest& r_;
};

void CompletionResponder::stream() {
  const std::string id = random_id(r_.endpoint == Endpoint::Completions ? "cmpl-" : "chatcmpl-");
  const int64_t created = int64_t(std::time(nullptr));
  const Tokenizer& tokenizer = c_.engine.tokenizer();
  const std::string& model = c_.model_name;
  if (!out_.begin_chunked(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return;
  const size_t n = size_t(run_->num_choices());
  const bool chat = r_.endpoint == Endpoint::ChatCompletions;
  std::vector<size_t> offsets(n, 0);  // characters of text sent so far, for logprobs.text_offset
  std::vector<int64_t> completion(n, 0);
  std::vector<DraftCounts> drafts(n);
  std::vector<bool> opened(n, false);  // the echo / role chunk went out
  int64_t cached = 0;
  bool ok = true;
  // The opening chunk: the chat role, or the echoed prompt (with its logprobs, which arrive with
  // the choice's first event).
  auto open = [&](size_t i, const GenerationEvent* first) {
    opened[i] = true;
    const std::string echo = r_.echo ? r_.prompt_texts[i / size_t(r_.n)] : "";
    offsets[i] = utf8_char_count(echo);
    if (!chat && echo.empty()) return true;
    std::vector<GeneratedToken> prompt_tokens;
    if (first != nullptr) prompt_tokens = first->prompt_logprobs;
    json chunk = stream_chunk(r_, int(i), echo, prompt_tokens, FinishReason::None, tokenizer, id, created, model, 0, chat);
    return send(chunk);
  };
  for (size_t i = 0; i < n && ok; ++i) {
    if (!r_.prompt_logprobs) ok = open(i, nullptr);
  }
  std::string failure;
  bool done = false;
  const bool tools = chat && r_.structured.tool_choice != ToolChoice::None;
  std::vector<std::string> held(n);      // `auto` replies recognised only when they end
  std::vector<std::string> call_ids(n);  // a named tool choice's call
  // `required` and Hermes-constrained `auto` replies stream their calls as they are generated.
  std::vector<std::optional<ToolCallStream>> call_streams(n);
  if (tools && (r_.structured.tool_choice == ToolChoice::Required || r_.structured.hermes_tool_calls)) {
    const auto format = r_.structured.tool_choice == ToolChoice::Required ? ToolCallStream::Format::RequiredList
                                                                          : ToolCallStream::Format::HermesTags;
    for (auto& s : call_streams) s.emplace(format, r_.structured);
  }
  auto last_write = std::chrono::steady_clock::now();
  while (ok && !done) {
    if (out_.aborting()) {
      send(error_json(503, kShuttingDown.what(), kShuttingDown.type(), "", kShuttingDown.code()));
      out_.write_chunk("data: [DONE]\n\n");
      out_.end_chunked();
      return;
    }
    bool wrote = false;
    done = run_->pump(kPoll, [&](int choice, GenerationEvent& event) {
      const size_t i = size_t(choice);
      completion[i] = event.completion_tokens;
      drafts[i] = {event.draft_tokens, event.accepted_draft_tokens};
      if (event.finished && choice % r_.n == 0) cached += event.cached_prompt_tokens;
      if (event.finish_reason == FinishReason::Error) failure = event.error;
      if (!ok) return;
      if (!opened[i]) ok = open(i, &event), wrote = true;
      if (r_.max_tokens == 0) {
        // Scoring only: the one token the engine generated is not part of the answer.
        event.text.clear();
        event.tokens.clear();
        completion[i] = 0;
        if (event.finished && event.finish_reason != FinishReason::Error) event.finish_reason = FinishReason::Length;
      }
      if (!ok || (event.text.empty() && event.tokens.empty() && !event.finished)) return;
      if (tools && r_.structured.tool_choice == ToolChoice::Named) {
        // The call is known from the start: its arguments stream as they are generated.
        std::string& call_id = call_ids[i];
        if (call_id.empty()) {
          call_id = new_tool_call_id();
          ok = send(tool_arguments_chunk(r_, choice, call_id, r_.structured.named_tool, "", nullptr, id, created, model));
        }
        if (ok && !event.text.empty()) {
          ok = send(tool_arguments_chunk(r_, choice, "", "", event.text, nullptr, id, created, model));
        }
        if (ok && event.finished && event.finish_reason != FinishReason::Error) {
          ok = send(tool_arguments_chunk(r_, choice, "", "", "",
                                         event.finish_reason == FinishReason::Length ? "length" : "stop", id, created,
                                         model));
        }
        wrote = true;
        return;
      }
      if (call_streams[i]) {
        ToolCallStream& stream = *call_streams[i];
        std::vector<ToolCallStream::Delta> deltas = stream.feed(event.text);
        const bool ended = event.finished && event.finish_reason != FinishReason::Error;
        if (ended) {
          for (ToolCallStream::Delta& d : stream.finish(event.finish_reason)) deltas.push_back(std::move(d));
        }
        for (const ToolCallStream::Delta& d : deltas) {
          if (ok) ok = send(tool_stream_chunk(r_, choice, d, id, created, model));
        }
        if (ok && ended) {
          const char* reason = event.finish_reason == FinishReason::Length ? "length"
                               : stream.calls() > 0                        ? "tool_calls"
                                                                           : "stop";
          ok = send(tool_arguments_chunk(r_, choice, "", "", "", reason, id, created, model));
        }
        wrote = true;
        return;
      }
      if (tools) {
        held[i] += event.text;
        if (!event.finished || event.finish_reason == FinishReason::Error) return;
        ok = send(tool_reply_chunk(r_, choice, held[i], event.finish_reason, id, created, model));
        wrote = true;
        return;
      }
      ok = send(stream_chunk(r_, choice, event.text, event.tokens,
                             event.finished ? event.finish_reason : FinishReason::None, tokenizer, id, created, model,
                             offsets[i], false));
      offsets[i] += utf8_char_count(event.text);
      wrote = true;
    });
    const auto now = std::chrono::steady_clock::now();
    if (wrote) {
      last_write = now;
    } else if (ok && !done && now - last_write >= kHeartbeat) {
      ok = out_.write_chunk(": keep-alive\n\n");
      last_write = now;
    }
    if (out_.client_gone()) return;  // ~CompletionRun aborts what is left
  }
  if (!ok) return;
  if (!failure.empty()) {
    send(error_json(500, failure, "internal_error", "", "generation_failed"));
  } else if (r_.include_usage) {
    int64_t total = 0;
    for (int64_t t : completion) total += t;
    DraftCounts all;
    for (const DraftCounts& d : drafts) all.draft_tokens += d.draft_tokens, all.accepted_tokens += d.accepted_tokens;
    send(usage_chunk(r_, id, created, model, run_->prompt_tokens(), total, cached,
                     c_.engine.speculative() ? &all : nullptr));
  }
  out_.write_chunk("data: [DONE]\n\n");
  out_.end_chunked();
}

void CompletionResponder::respond_whole() {
  std::vector<ChoiceResult> choices(size_t(run_->num_choices()));
  std::vector<GenerationEvent> first(choices.size());
  std::vector<bool> seen(choices.size(), false);
  int64_t cached = 0;
  bool done = false;
  while (!done) {
    // The status is sent with the result, so nothing is written meanwhile: the client's leaving is
    // seen on the socket.
    if (out_.client_gone()) return;
    if (out_.aborting()) {
      out_.send(error_response(kShuttingDown));
      return;
    }
    done = run_->pump(kPoll, [&](int choice, GenerationEvent& event) {
      ChoiceResult& c = choices[size_t(choice)];
      if (!seen[size_t(choice)]) {
        seen[size_t(choice)] = true;
        first[size_t(choice)].prompt_logprobs = std::move(event.prompt_logprobs);
      }
      c.text += event.text;
      for (auto& t : event.tokens) c.tokens.push_back(std::move(t));
      c.completion_tokens = event.completion_tokens;
      c.draft_tokens = event.draft_tokens;
      c.accepted_draft_tokens = event.accepted_draft_tokens;
      if (event.finished) {
        c.finish_reason = event.finish_reason;
        c.error = event.error;
        if (choice % r_.n == 0) cached += event.cached_prompt_tokens;
      }
    });
  }
  for (size_t i = 0; i < choices.size(); ++i) {
    ChoiceResult& c = choices[i];
    if (c.finish_reason == FinishReason::Error) {
      out_.send(error_response(ApiError(500, "generation failed: " + c.error, "internal_error", "", "generation_failed")));
      return;
    }
    if (r_.max_tokens == 0) {
      c.text.clear();
      c.tokens.clear();
      c.completion_tokens = 0;
      c.finish_reason = FinishReason::Length;
    }
    c.tokens = listed_tokens(r_, first[i], std::move(c.tokens));
  }
  const json body = completion_response(
      r_, choices, c_.engine.tokenizer(), random_id(r_.endpoint == Endpoint::Completions ? "cmpl-" : "chatcmpl-"),
      int64_t(std::time(nullptr)), c_.model_name, run_->prompt_tokens(), cached, c_.engine.speculative());
  out_.send(HttpResponse{200, "application/json", dump_json(body), {}});
}

}  // namespace

HttpResponse error_response(const ApiError& e) {
  HttpResponse response{e.status(), "application/json",
                        dump_json(error_json(e.status(), e.what(), e.type(), e.param(), e.code())), {}};
  if (e.status() == 503) response.headers.emplace_back("Retry-After", "1");
  return response;
}

void handle_completion(const CompletionContext& c, const HttpRequest& http_request, ResponseStream& out,
                       Endpoint endpoint) {
  try {
    nlohmann::ordered_json body;
    try {
      body = nlohmann::ordered_json::parse(http_request.body);
    } catch (const nlohmann::ordered_json::exception& e) {
      // Syntax errors, and numbers too large for a double (out_of_range.406, e.g. 1e400).
      throw ApiError(400, fmt::format("malformed JSON body: {}", e.what()), "invalid_request_error", "",
                     "invalid_json");
    }
    ParsedRequest request = endpoint == Endpoint::Completions
                                ? parse_completion_request(body, c.engine.tokenizer())
                                : parse_chat_request(body, c.engine.tokenizer(), c.chat_template);
    if (!request.model.empty() && request.model != c.model_name) {
      throw ApiError(404, fmt::format("the model '{}' does not exist (this server serves '{}')", request.model,
                                      c.model_name),
                     "not_found_error", "model", "model_not_found");
    }
    prepare_constraint(c.engine, request, c.json_any_whitespace);
    auto run = std::make_shared<CompletionRun>(c.engine, request);
    CompletionResponder responder(c, out, std::move(run), request);
    if (request.stream) {
      responder.stream();
    } else {
      responder.respond_whole();
    }
  } catch (const ApiError& e) {
    out.send(error_response(e));
  }
}

}  // namespace kestrel::server
