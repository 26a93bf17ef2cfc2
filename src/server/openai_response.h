// Building OpenAI-format response bodies and stream chunks.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/async_engine.h"
#include "server/openai_request.h"
#include "server/tool_call_stream.h"

namespace kestrel::server {

// Everything one choice produced, accumulated from its GenerationEvents.
struct ChoiceResult {
  std::string text;
  std::vector<GeneratedToken> tokens;
  FinishReason finish_reason = FinishReason::None;
  std::string error;
  int64_t completion_tokens = 0;
  int64_t draft_tokens = 0;           // speculative drafts verified for this choice
  int64_t accepted_draft_tokens = 0;  // of which accepted
};

// Speculative decoding's share of a response, reported (when the server speculates) as OpenAI's
// completion_tokens_details.accepted_prediction_tokens / rejected_prediction_tokens.
struct DraftCounts {
  int64_t draft_tokens = 0;
  int64_t accepted_tokens = 0;
};

const char* openai_finish_reason(FinishReason reason);

// Completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset}.
// text_offset counts characters; tokens_as_ids names tokens "token_id:N".
nlohmann::json completion_logprobs(const std::vector<GeneratedToken>& tokens, const Tokenizer& tokenizer,
                                   size_t text_offset, bool tokens_as_ids = false);
// Chat logprobs: {content: [{token, logprob, bytes, top_logprobs: [...]}, ...]}.
nlohmann::json chat_logprobs(const std::vector<GeneratedToken>& tokens, const Tokenizer& tokenizer,
                             bool tokens_as_ids = false);

// `drafts`: nullptr when the server does not speculate (no completion_tokens_details).
nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens,
                          const DraftCounts* drafts = nullptr);

// A full non-streaming response.
nlohmann::json completion_response(const ParsedRequest& request, const std::vector<ChoiceResult>& choices,
                                   const Tokenizer& tokenizer, const std::string& id, int64_t created,
                                   const std::string& model, int64_t prompt_tokens,
                                   int64_t cached_tokens, bool speculative = false);

// One stream chunk for choice `index` with new text/tokens (finish_reason null unless finished).
nlohmann::json stream_chunk(const ParsedRequest& request, int index, const std::string& text,
                            const std::vector<GeneratedToken>& tokens, FinishReason finish,
                            const Tokenizer& tokenizer, const std::string& id, int64_t created,
                            const std::string& model, size_t text_offset, bool first_chat_chunk);

// A tool-enabled chat choice's reply in one chunk when it ends, for the `auto` formats that are
// recognised only in the whole reply (Llama 3.x JSON, Mistral): content and/or tool_calls.
nlohmann::json tool_reply_chunk(const ParsedRequest& request, int index, const std::string& text, FinishReason finish,
                                const std::string& id, int64_t created, const std::string& model);

// A named tool choice streams as OpenAI streams a call: the first chunk opens call 0 (`call_id`
// and `name` given, empty arguments), later ones carry argument text; `finish` (null while
// running) ends the choice.
nlohmann::json tool_arguments_chunk(const ParsedRequest& request, int index, const std::string& call_id,
                                    const std::string& name, const std::string& arguments, const char* finish,
                                    const std::string& id, int64_t created, const std::string& model);

// A `required` or Hermes-constrained `auto` tool choice streams as it is generated
// (ToolCallStream): one chunk per delta, content or a part of call `delta.call` (its id, type and
// name on its first chunk).
nlohmann::json tool_stream_chunk(const ParsedRequest& request, int index, const ToolCallStream::Delta& delta,
                                 const std::string& id, int64_t created, const std::string& model);

// The final usage-only chunk (stream_options.include_usage).
nlohmann::json usage_chunk(const ParsedRequest& request, const std::string& id, int64_t created,
                           const std::string& model, int64_t prompt_tokens,
                           int64_t completion_tokens, int64_t cached_tokens, const DraftCounts* drafts = nullptr);

// OpenAI's error shape; `code` is always a string (`default_error_code(status)` when none is given).
std::string default_error_code(int status);
nlohmann::json error_json(int status, const std::string& message, const std::string& type,
                          const std::string& param, const std::string& code);

// JSON text with invalid UTF-8 (a token that is half a character) replaced, never thrown on.
std::string dump_json(const nlohmann::json& value);

}  // namespace kestrel::server
