// Parsing and validation of OpenAI /v1/completions and /v1/chat/completions request bodies into
// what the engine needs. Every bad field is an ApiError(400) naming the parameter.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "grammar/grammar_compiler.h"
#include "sample/sampling_params.h"
#include "server/structured_request.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server {

enum class Endpoint { Completions, ChatCompletions };

struct ParsedRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;                        // as given (may be empty)
  std::vector<std::vector<TokenId>> prompts;  // completions may carry several; chat exactly one
  std::vector<std::string> prompt_texts;    // for echo
  int64_t max_tokens = -1;                  // -1: until the context is full; 0: echo only (scoring)
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  SamplingParams sampling;
  bool seeded = false;                      // the client gave a seed
  int top_logprobs = -1;                    // -1: no logprobs
  bool prompt_logprobs = false;             // echo with logprobs: the prompt's tokens are scored too
  bool tokens_as_ids = false;               // vLLM's return_tokens_as_token_ids: "token_id:123"
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int priority = 0;
  StructuredRequest structured;  // response_format, structured_outputs, guided_*, tools
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // compiled from structured.constraint
};

ParsedRequest parse_completion_request(const nlohmann::ordered_json& body, const Tokenizer& tokenizer);
// `chat_template` null means the model has none: chat requests are then a 400 with a clear message.
// The body is parsed with key order kept: templates that serialise messages (tojson) see them as
// the client sent them, as transformers does.
ParsedRequest parse_chat_request(const nlohmann::ordered_json& body, const Tokenizer& tokenizer,
                                 const chat::ChatTemplate* chat_template);

}  // namespace kestrel::server
