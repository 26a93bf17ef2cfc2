// Chat templates: renders a conversation into a prompt with a model's Jinja chat template exactly as
// Hugging Face transformers' apply_chat_template(..., tokenize=False) does, using Kestrel's own
// interpreter for the Jinja2 subset that chat templates use (src/chat/README.md lists it).
//
//   auto tmpl = kestrel::chat::ChatTemplate::parse(source);  // throws ChatTemplateError on bad syntax
//   ChatTemplateOptions options;
//   options.bos_token = "<|begin_of_text|>";
//   std::string prompt = tmpl.render(messages, options);     // throws ChatTemplateError
#pragma once

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/template_error.h"

namespace kestrel::chat {

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // The tokenizer's special tokens. transformers only passes the tokens a tokenizer has, so an
  // absent token is undefined in the template (`bos_token is defined` is false), not "".
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // Tool schemas (a JSON array); null means no tools (the template sees `tools` as none).
  nlohmann::ordered_json tools;
  // RAG documents (a JSON array); null means none.
  nlohmann::ordered_json documents;
  // Extra template variables, e.g. {"enable_thinking": false} or {"date_string": "1 Jan 2025"}.
  // Like transformers' **kwargs they override the special tokens; they may not be named
  // messages, tools, documents or add_generation_prompt.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
  // The time strftime_now() formats; the local time of the call when absent.
  std::optional<std::tm> now;
};

class ChatTemplate {
 public:
  // Parses a template; throws ChatTemplateError (kind Syntax, with line and column).
  static ChatTemplate parse(std::string source);

  // Renders `messages` (a JSON array of message objects). Before rendering, like transformers,
  // keys whose value is null are dropped from each message, and a message's reasoning
  // (reasoning_content, thinking or reasoning) is also passed as `reasoning_content` and
  // `thinking`. Key order matters to some templates (tojson, dict iteration): use ordered_json
  // to keep it; the nlohmann::json overload sees keys in sorted order.
  std::string render(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options = {}) const;
  std::string render(const nlohmann::json& messages, const ChatTemplateOptions& options = {}) const;

  const std::string& source() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Built-in templates for models that ship without one (or to override theirs): Jinja sources that
// reproduce well-known prompt formats. Names: see builtin_chat_template_names().
std::optional<std::string> builtin_chat_template(std::string_view name);
std::vector<std::string> builtin_chat_template_names();

}  // namespace kestrel::chat
