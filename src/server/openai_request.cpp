#include "server/openai_request.h"

#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/request_fields.h"

namespace kestrel::server {
namespace {

using json = nlohmann::ordered_json;

double number(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number", name));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
  return x;
}

int64_t integer(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) bad(name, fmt::format("'{}' must be an integer", name));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
  return x;
}

std::vector<TokenId> token_list(const json& array, const Tokenizer& tokenizer) {
  std::vector<TokenId> tokens;
  for (const json& t : array) {
    if (!t.is_number_integer()) bad("prompt", "a token prompt must be a list of integers");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= tokenizer.vocab_size()) {
      bad("prompt", fmt::format("token id {} is outside the vocabulary (size {})", id, tokenizer.vocab_size()));
    }
    tokens.push_back(TokenId(id));
  }
  return tokens;
}

// Every field either endpoint reads, and `user` (OpenAI's end-user id for abuse monitoring: it
// changes no output). Anything else is refused by name rather than silently ignored.
const std::set<std::string> kCommonFields = {
    "model", "n", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "seed", "stop", "ignore_eos", "priority", "logit_bias", "user",
    "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "guided_whitespace_pattern", "guided_decoding_backend", "return_tokens_as_token_ids"};
const std::set<std::string> kCompletionFields = {"prompt", "max_tokens", "echo", "logprobs", "suffix", "best_of"};
const std::set<std::string> kChatFields = {"messages", "max_tokens", "max_completion_tokens", "logprobs",
                                           "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
                                           "add_generation_prompt", "chat_template_kwargs"};

// Fields shared by both endpoints.
void parse_common(const json& body, ParsedRequest& r) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) bad("model", "'model' must be a string");
    r.model = m->get<std::string>();
  }
  r.n = int(integer(body, "n", 1, 1, 16));
  r.stream = boolean(body, "stream", false);
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with stream=true");
    r.include_usage = boolean(*options, "include_usage", false);
  }
  SamplingParams& s = r.sampling;
  s.temperature = float(number(body, "temperature", 1.0, 0.0, 2.0));
  s.top_p = float(number(body, "top_p", 1.0, 0.0, 1.0));
  if (s.top_p <= 0.0f) bad("top_p", "'top_p' must be greater than 0");
  s.top_k = int(integer(body, "top_k", 0, -1, 1 << 30));
  if (s.top_k < 0) s.top_k = 0;  // vLLM uses -1 for "off"
  s.min_p = float(number(body, "min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = float(number(body, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = float(number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  s.repetition_penalty = float(number(body, "repetition_penalty", 1.0, 0.01, 10.0));
  // OpenAI semantics: penalties look at everything generated so far.
  s.penalty_last_n = -1;
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) bad("seed", "'seed' must be an integer");
    s.seed = uint64_t(seed->get<int64_t>());
    r.seeded = true;
  }
  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& item : *stop) {
        if (!item.is_string()) bad("stop", "'stop' must be a string or a list of strings");
        r.stop.push_back(item.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or a list of strings");
    }
    if (r.stop.size() > 16) bad("stop", "at most 16 stop strings are allowed");
  }
  r.ignore_eos = boolean(body, "ignore_eos", false);
  r.tokens_as_ids = boolean(body, "return_tokens_as_token_ids", false);
  r.priority = int(integer(body, "priority", 0, -1000000, 1000000));
  if (const json* bias = field(body, "logit_bias"); bias != nullptr && !bias->empty()) {
    bad("logit_bias", "'logit_bias' is not supported");
  }
  if (const json* best_of = field(body, "best_of"); best_of != nullptr && *best_of != json(r.n)) {
    bad("best_of", "'best_of' other than n is not supported");
  }
}

}  // namespace

ParsedRequest parse_completion_request(const json& body, const Tokenizer& tokenizer) {
  ParsedRequest r;
  r.endpoint = Endpoint::Completions;
  parse_common(body, r);
  refuse_unknown_fields(body, {&kCommonFields, &kCompletionFields});
  r.structured = parse_structured_request(body, /*chat=*/false);
  r.max_tokens = integer(body, "max_tokens", 16, 0, int64_t(1) << 31);
  r.echo = boolean(body, "echo", false);
  if (const json* logprobs = field(body, "logprobs")) {
    if (!logprobs->is_number_integer()) bad("logprobs", "'logprobs' must be an integer from 0 to 20");
    r.top_logprobs = int(integer(body, "logprobs", 0, 0, 20));
  }
  // Scoring a prompt (lm-evaluation-harness's loglikelihood): echo with logprobs lists the
  // prompt's tokens with theirs; max_tokens 0 generates nothing.
  r.prompt_logprobs = r.echo && r.top_logprobs >= 0;
  if (r.max_tokens == 0 && !r.echo) bad("max_tokens", "'max_tokens' 0 is only allowed with 'echo': true (scoring the prompt)");
  if (field(body, "suffix") != nullptr) bad("suffix", "'suffix' is not supported");

  const json* prompt = field(body, "prompt");
  if (prompt == nullptr) bad("prompt", "'prompt' is required");
  auto add_text = [&](const std::string& text) {
    r.prompt_texts.push_back(text);
    r.prompts.push_back(tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/true));
  };
  if (prompt->is_string()) {
    add_text(prompt->get<std::string>());
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
    r.prompts.push_back(token_list(*prompt, tokenizer));
    r.prompt_texts.push_back(tokenizer.decode(r.prompts.back(), false));
  } else if (prompt->is_array() && !prompt->empty()) {
    for (const json& item : *prompt) {
      if (item.is_string()) {
        add_text(item.get<std::string>());
      } else if (item.is_array()) {
        r.prompts.push_back(token_list(item, tokenizer));
        r.prompt_texts.push_back(tokenizer.decode(r.prompts.back(), false));
      } else {
        bad("prompt", "'prompt' must be a string, a list of strings, or token lists");
      }
    }
  } else {
    bad("prompt", "'prompt' must be a non-empty string, list of strings, or token list");
  }
  if (r.prompts.size() * size_t(r.n) > 64) bad("prompt", "at most 64 prompts x n per request");
  for (const auto& p : r.prompts) {
    if (p.empty()) bad("prompt", "the prompt is empty (and the model adds no BOS token)");
  }
  return r;
}

ParsedRequest parse_chat_request(const json& body, const Tokenizer& tokenizer,
                                 const chat::ChatTemplate* chat_template) {
  ParsedRequest r;
  r.endpoint = Endpoint::ChatCompletions;
  parse_common(body, r);
  refuse_unknown_fields(body, {&kCommonFields, &kChatFields});
  r.structured = parse_structured_request(body, /*chat=*/true);
  const int64_t max_completion = integer(body, "max_completion_tokens", -1, 1, int64_t(1) << 31);
  r.max_tokens = integer(body, "max_tokens", max_completion, 1, int64_t(1) << 31);
  if (boolean(body, "logprobs", false)) {
    r.top_logprobs = int(integer(body, "top_logprobs", 0, 0, 20));
  } else if (field(body, "top_logprobs") != nullptr) {
    bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  const json* messages = field(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    bad("messages", "'messages' must be a non-empty list");
  }
  // Normalise content given as a list of parts into one string (text parts only).
  json normalized = json::array();
  for (const json& m : *messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      bad("messages", "each message must be an object with a string 'role'");
    }
    json copy = m;
    // OpenAI's `developer` role is the system prompt for templates, which know only `system`.
    const std::string role = m["role"].get<std::string>();
    if (role == "developer") {
      copy["role"] = "system";
    } else if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      bad("messages", fmt::format("unknown message role '{}' (system, developer, user, assistant, tool)", role));
    }
    if (role == "tool" && (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())) {
      bad("messages", "a 'tool' message needs the 'tool_call_id' of the call it answers");
    }
    // Templates (Qwen2.5, Llama 3.x, Hermes) write a call's arguments with tojson and expect an
    // object; the API carries them as a JSON string.
    if (m.contains("tool_calls")) {
      if (!m["tool_calls"].is_array()) bad("messages", "'tool_calls' must be a list");
      for (json& call : copy["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
          bad("messages", "each tool call needs a 'function' object");
        }
        json& args = call["function"]["arguments"];
        if (args.is_string()) {
          json parsed = json::parse(args.get<std::string>(), nullptr, false);
          if (parsed.is_object()) args = std::move(parsed);
        }
      }
    }
    // A reply that only called tools has no content: templates concatenate it as a string (as
    // llama.cpp's server does, null becomes "").
    if (!m.contains("content") || m["content"].is_null()) copy["content"] = "";
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (const json& part : m["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          bad("messages", "only text content parts are supported");
        }
        text += part["text"].get<std::string>();
      }
      copy["content"] = text;
    } else if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null()) {
      bad("messages", "message 'content' must be a string or a list of text parts");
    }
    normalized.push_back(std::move(copy));
  }
  if (chat_template == nullptr) {
    bad("messages",
        "this model has no chat template (tokenizer.chat_template); use /v1/completions, or start "
        "the server with --chat-template NAME|FILE");
  }
  chat::ChatTemplateOptions options;
  options.add_generation_prompt = boolean(body, "add_generation_prompt", true);
  const auto& vocab = tokenizer.vocab();
  if (vocab.bos_id >= 0) options.bos_token = tokenizer.token_to_piece(vocab.bos_id, true);
  if (vocab.eos_id >= 0) options.eos_token = tokenizer.token_to_piece(vocab.eos_id, true);
  if (const json* tools = field(body, "tools")) options.tools = *tools;
  if (const json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    options.extra_context = *kwargs;
  }
  std::string prompt;
  try {
    prompt = chat_template->render(normalized, options);
  } catch (const Error& e) {
    bad("messages", fmt::format("the chat template failed: {}", e.what()));
  }
  // Auto tool choice with a Hermes/Qwen-style template: calls are constrained once they open.
  if (r.structured.tool_choice == ToolChoice::Auto && !r.structured.constraint &&
      chat_template->source().find("<tool_call>") != std::string::npos) {
    r.structured.constraint = hermes_tool_calls_constraint(r.structured.tools);
    r.structured.constraint_param = "tools";
    r.structured.hermes_tool_calls = true;
  }
  r.prompt_texts.push_back(prompt);
  // The template writes BOS itself when the model wants one.
  r.prompts.push_back(tokenizer.encode(prompt, /*add_special=*/false, /*parse_special=*/true));
  if (r.prompts.back().empty()) bad("messages", "the rendered chat prompt is empty");
  return r;
}

}  // namespace kestrel::server
