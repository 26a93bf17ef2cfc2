#include "server/openai_response.h"

#include <cmath>

#include <fmt/format.h>

#include "core/utf8.h"
#include "server/tool_calls.h"

namespace kestrel::server {
namespace {

using json = nlohmann::json;

json bytes_of(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(int(c));
  return out;
}

const char* object_name(const ParsedRequest& r, bool chunk) {
  if (r.endpoint == Endpoint::Completions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

// finish_reason is null until the choice ends.
json finish_json(FinishReason reason) {
  const char* name = openai_finish_reason(reason);
  return name == nullptr ? json(nullptr) : json(name);
}

// A stream chunk carrying one choice (usage null until the last chunk when the client asked).
json chunk_of(const ParsedRequest& r, json choice, const std::string& id, int64_t created, const std::string& model) {
  json chunk = {{"id", id}, {"object", object_name(r, true)}, {"created", created},
                {"model", model}, {"choices", json::array({std::move(choice)})}};
  if (r.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json logprobs_for(const ParsedRequest& r, const std::vector<GeneratedToken>& tokens,
                  const Tokenizer& tokenizer, size_t text_offset) {
  if (r.top_logprobs < 0) return nullptr;
  return r.endpoint == Endpoint::Completions ? completion_logprobs(tokens, tokenizer, text_offset, r.tokens_as_ids)
                                             : chat_logprobs(tokens, tokenizer, r.tokens_as_ids);
}

}  // namespace

const char* openai_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::Error: return "error";
    case FinishReason::None: return nullptr;
  }
  return nullptr;
}

namespace {

// A token as logprobs name it: its text, or "token_id:N" (vLLM's return_tokens_as_token_ids).
std::string token_name(const Tokenizer& tokenizer, TokenId id, bool as_id) {
  return as_id ? fmt::format("token_id:{}", id) : tokenizer.token_to_piece(id, true);
}

}  // namespace

json completion_logprobs(const std::vector<GeneratedToken>& tokens, const Tokenizer& tokenizer,
                         size_t text_offset, bool tokens_as_ids) {
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()},
              {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  for (const GeneratedToken& t : tokens) {
    const std::string piece = tokenizer.token_to_piece(t.id, true);
    out["tokens"].push_back(token_name(tokenizer, t.id, tokens_as_ids));
    // A prompt's first token has no logprob (nothing predicts it): null, as OpenAI and vLLM give.
    if (std::isnan(t.logprob)) {
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
    } else {
      out["token_logprobs"].push_back(t.logprob);
      json top = json::object();
      for (const TokenLogprob& alt : t.top_logprobs) top[token_name(tokenizer, alt.token, tokens_as_ids)] = alt.logprob;
      out["top_logprobs"].push_back(top);
    }
    out["text_offset"].push_back(text_offset);
    text_offset += utf8_char_count(piece);  // characters, as OpenAI and vLLM count
  }
  return out;
}

json chat_logprobs(const std::vector<GeneratedToken>& tokens, const Tokenizer& tokenizer, bool tokens_as_ids) {
  json content = json::array();
  for (const GeneratedToken& t : tokens) {
    const std::string piece = tokenizer.token_to_piece(t.id, true);
    json top = json::array();
    for (const TokenLogprob& alt : t.top_logprobs) {
      const std::string alt_piece = tokenizer.token_to_piece(alt.token, true);
      top.push_back({{"token", token_name(tokenizer, alt.token, tokens_as_ids)}, {"logprob", alt.logprob},
                     {"bytes", bytes_of(alt_piece)}});
    }
    content.push_back({{"token", token_name(tokenizer, t.id, tokens_as_ids)}, {"logprob", t.logprob},
                       {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens, const DraftCounts* drafts) {
  json usage = {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  if (drafts != nullptr) {
    usage["completion_tokens_details"] = {{"accepted_prediction_tokens", drafts->accepted_tokens},
                                          {"rejected_prediction_tokens", drafts->draft_tokens - drafts->accepted_tokens}};
  }
  return usage;
}

json completion_response(const ParsedRequest& r, const std::vector<ChoiceResult>& choices,
                         const Tokenizer& tokenizer, const std::string& id, int64_t created,
                         const std::string& model, int64_t prompt_tokens, int64_t cached_tokens, bool speculative) {
  json out_choices = json::array();
  int64_t completion_tokens = 0;
  DraftCounts drafts;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    completion_tokens += c.completion_tokens;
    drafts.draft_tokens += c.draft_tokens;
    drafts.accepted_tokens += c.accepted_draft_tokens;
    const std::string prefix = r.echo ? r.prompt_texts[i / size_t(r.n)] : "";
    // With prompt logprobs the listed tokens start at the prompt, offset 0.
    const size_t first_offset = r.prompt_logprobs ? 0 : utf8_char_count(prefix);
    json choice = {{"index", i}, {"logprobs", logprobs_for(r, c.tokens, tokenizer, first_offset)},
                   {"finish_reason", finish_json(c.finish_reason)}};
    if (r.endpoint == Endpoint::Completions) {
      choice["text"] = prefix + c.text;
    } else if (r.structured.tool_choice != ToolChoice::None) {
      const ToolCallReply reply = extract_tool_calls(r.structured, c.text, c.finish_reason);
      json message = {{"role", "assistant"}, {"content", reply.content ? json(*reply.content) : json(nullptr)}};
      if (!reply.tool_calls.empty()) message["tool_calls"] = reply.tool_calls;
      choice["message"] = std::move(message);
      choice["finish_reason"] = reply.finish_reason;
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    }
    out_choices.push_back(std::move(choice));
  }
  return {{"id", id},
          {"object", object_name(r, false)},
          {"created", created},
          {"model", model},
          {"choices", out_choices},
          {"usage", usage_json(prompt_tokens, completion_tokens, cached_tokens, speculative ? &drafts : nullptr)}};
}

json stream_chunk(const ParsedRequest& r, int index, const std::string& text,
                  const std::vector<GeneratedToken>& tokens, FinishReason finish,
                  const Tokenizer& tokenizer, const std::string& id, int64_t created,
                  const std::string& model, size_t text_offset, bool first_chat_chunk) {
  json choice = {{"index", index},
                 {"logprobs", logprobs_for(r, tokens, tokenizer, text_offset)},
                 {"finish_reason", finish_json(finish)}};
  if (r.endpoint == Endpoint::Completions) {
    choice["text"] = text;
  } else {
    json delta = json::object();
    if (first_chat_chunk) delta["role"] = "assistant";
    if (!text.empty() || first_chat_chunk) delta["content"] = text;
    choice["delta"] = delta;
  }
  return chunk_of(r, std::move(choice), id, created, model);
}

json tool_reply_chunk(const ParsedRequest& r, int index, const std::string& text, FinishReason finish,
                      const std::string& id, int64_t created, const std::string& model) {
  const ToolCallReply reply = extract_tool_calls(r.structured, text, finish);
  json delta = json::object();
  if (reply.content) delta["content"] = *reply.content;
  if (!reply.tool_calls.empty()) {
    json calls = json::array();
    for (size_t k = 0; k < reply.tool_calls.size(); ++k) {
      json call = reply.tool_calls[k];
      call["index"] = k;
      calls.push_back(std::move(call));
    }
    delta["tool_calls"] = std::move(calls);
  }
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", reply.finish_reason}, {"delta", delta}};
  return chunk_of(r, std::move(choice), id, created, model);
}

json tool_arguments_chunk(const ParsedRequest& r, int index, const std::string& call_id, const std::string& name,
                          const std::string& arguments, const char* finish, const std::string& id, int64_t created,
                          const std::string& model) {
  json call = {{"index", 0}, {"function", {{"arguments", arguments}}}};
  json delta = json::object();
  if (!call_id.empty()) {
    delta["role"] = "assistant";
    call["id"] = call_id;
    call["type"] = "function";
    call["function"]["name"] = name;
  }
  if (!call_id.empty() || !arguments.empty()) delta["tool_calls"] = json::array({call});
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish ? json(finish) : json(nullptr)},
                 {"delta", delta}};
  return chunk_of(r, std::move(choice), id, created, model);
}

json tool_stream_chunk(const ParsedRequest& r, int index, const ToolCallStream::Delta& d, const std::string& id,
                       int64_t created, const std::string& model) {
  json delta = json::object();
  if (d.call < 0) {
    delta["content"] = d.content;
  } else {
    json call = {{"index", d.call}, {"function", {{"arguments", d.arguments}}}};
    if (!d.id.empty()) {
      call["id"] = d.id;
      call["type"] = "function";
      call["function"]["name"] = d.name;
    }
    delta["tool_calls"] = json::array({call});
  }
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", nullptr}, {"delta", delta}};
  return chunk_of(r, std::move(choice), id, created, model);
}

json usage_chunk(const ParsedRequest& r, const std::string& id, int64_t created, const std::string& model,
                 int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens, const DraftCounts* drafts) {
  return {{"id", id}, {"object", object_name(r, true)}, {"created", created}, {"model", model},
          {"choices", json::array()}, {"usage", usage_json(prompt_tokens, completion_tokens, cached_tokens, drafts)}};
}

std::string default_error_code(int status) {
  switch (status) {
    case 400: return "invalid_request";
    case 401: return "invalid_api_key";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 408: return "request_timeout";
    case 411: return "length_required";
    case 413: return "request_too_large";
    case 429: return "rate_limited";
    case 431: return "request_header_too_large";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "internal_error" : "invalid_request";
  }
}

json error_json(int status, const std::string& message, const std::string& type,
                const std::string& param, const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? default_error_code(status) : code}}}};
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kestrel::server
