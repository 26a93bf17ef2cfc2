#include "chat/chat_template.h"

#include <fmt/format.h>

#include "chat/interpreter.h"
#include "chat/parser.h"

namespace kestrel::chat {

ChatTemplateError::ChatTemplateError(Kind kind, int line, int column, const std::string& detail)
    : ChatTemplateError(fmt::format("chat template {} error at line {}, column {}: {}",
                                    kind == Kind::Syntax ? "syntax" : "runtime", line, column, detail),
                        kind, line, column, detail) {}

ChatTemplateError ChatTemplateError::raised(const std::string& message, int line, int column) {
  return ChatTemplateError(message, Kind::Raised, line, column, message);
}

struct ChatTemplate::Impl {
  std::string source;
  Body program;
};

ChatTemplate ChatTemplate::parse(std::string source) {
  auto impl = std::make_shared<Impl>();
  impl->program = parse_template(source);
  impl->source = std::move(source);
  return ChatTemplate(std::move(impl));
}

const std::string& ChatTemplate::source() const { return impl_->source; }

namespace {

// transformers' _normalize_chat_messages (drop null values) and _alias_reasoning_fields.
Value prepare_messages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) fail("chat messages must be a JSON array, got {}", messages.type_name());
  if (messages.empty())
    fail("Cannot apply chat template to an empty conversation. Provide at least one message.");
  ValueList out;
  for (const auto& message : messages) {
    if (!message.is_object())
      fail("Chat messages should be dicts, dataclasses or pydantic models, but got {}", message.dump());
    nlohmann::ordered_json cleaned = nlohmann::ordered_json::object();
    for (const auto& [key, value] : message.items())
      if (!value.is_null()) cleaned[key] = value;
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
      if (cleaned.contains(field)) {
        reasoning = &cleaned[field];
        break;
      }
    }
    if (reasoning) {
      nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
      aliased["thinking"] = *reasoning;
      for (const auto& [key, value] : cleaned.items()) aliased[key] = value;
      aliased["reasoning_content"] = *reasoning;
      cleaned = std::move(aliased);
    }
    out.push_back(Value::from_json(cleaned));
  }
  return Value::list(std::move(out));
}

}  // namespace

std::string ChatTemplate::render(const nlohmann::ordered_json& messages,
                                 const ChatTemplateOptions& options) const {
  std::unordered_map<std::string, Value> context;
  if (options.bos_token) context["bos_token"] = Value(*options.bos_token);
  if (options.eos_token) context["eos_token"] = Value(*options.eos_token);
  if (!options.extra_context.is_null()) {
    if (!options.extra_context.is_object()) fail("chat template extra_context must be a JSON object");
    for (const auto& [key, value] : options.extra_context.items()) {
      if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt")
        fail("chat template extra_context may not set '{}': it has its own option", key);
      context[key] = Value::from_json(value);
    }
  }
  context["messages"] = prepare_messages(messages);
  context["tools"] = Value::from_json(options.tools);
  context["documents"] = Value::from_json(options.documents);
  context["add_generation_prompt"] = Value(options.add_generation_prompt);
  Interpreter interpreter(impl_->program, std::move(context), options.now);
  return interpreter.render();
}

std::string ChatTemplate::render(const nlohmann::json& messages, const ChatTemplateOptions& options) const {
  return render(nlohmann::ordered_json(messages), options);
}

}  // namespace kestrel::chat
