// ChatSession: a multi-turn conversation over one LLMEngine, the library side of `kestrel chat`.
//
// Every turn renders the whole conversation with the chat template (add_generation_prompt),
// tokenizes it the way the server does, and runs it as one request. Nothing is carried over by
// hand: the engine's automatic prefix caching finds the blocks of the previous turns — prompt and
// generated tokens alike, since every full computed block is cached — so a turn computes little
// more than the new message and the template's markup around it.
//
//   ChatSession session(engine, tokenizer, tmpl, options);
//   ChatTurnStats stats = session.send("Hello", [](std::string_view text) { print(text); });
//   session.clear();  // a new conversation
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "core/error.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::gguf {
class GgufFile;
}

namespace kestrel {

struct ChatSessionOptions {
  std::string system_prompt;        // "": no system message
  int64_t max_reply_tokens = 512;   // per reply; a reply also ends where the context does
  SamplingParams sampling;
};

struct ChatTurnStats {
  int64_t prompt_tokens = 0;        // the whole rendered conversation
  int64_t cached_tokens = 0;        // of those, tokens whose K/V came from the prefix cache
  int64_t generated_tokens = 0;     // including an end-of-turn token
  double prompt_seconds = 0.0;      // submission to first token
  double generation_seconds = 0.0;  // first token to last
  FinishReason finish_reason = FinishReason::None;
  bool context_full = false;        // the reply was cut because the context is full
};

// The conversation plus the new message no longer fits the context. The session is unchanged
// (the message is not kept), so the caller can /clear and go on.
class ContextFullError : public Error {
 public:
  using Error::Error;
};

class ChatSession {
 public:
  using TextSink = std::function<void(std::string_view)>;
  // Polled before every engine step; true stops the reply (Ctrl-C in `kestrel chat`).
  using StopCheck = std::function<bool()>;

  // The engine is used only by this session while send() runs; it should hold one sequence's
  // worth of KV blocks (see make_chat_engine_config) with prefix caching on for reuse.
  ChatSession(LLMEngine& engine, const Tokenizer& tokenizer, chat::ChatTemplate chat_template,
              ChatSessionOptions options);

  // Adds the user's message, generates the assistant's reply (streamed to `on_text` as it is
  // decoded, never splitting a UTF-8 character) and adds it to the conversation. Throws
  // ContextFullError if no reply token fits; other kestrel::Errors (template, engine) also leave
  // the conversation unchanged.
  // When `should_stop` says so the request is aborted and finish_reason is Abort. A reply cut
  // after some tokens is kept as the assistant's turn: it is what the user saw, the next turn
  // reuses its blocks, and templates that insist on alternating roles still get user, assistant.
  // Stopped before any reply token (during the prompt pass), the message is dropped with nothing
  // to show for it, and the conversation is unchanged.
  ChatTurnStats send(std::string_view user_message, const TextSink& on_text, const StopCheck& should_stop = {});
  // Starts a new conversation (same system prompt). Cached blocks stay until evicted.
  void clear();

  // The conversation as the template sees it (system, user, assistant, ... messages).
  const nlohmann::ordered_json& messages() const { return messages_; }
  // Token ids of the last turn: the rendered prompt, and the reply without its end-of-turn token.
  const std::vector<TokenId>& last_prompt() const { return last_prompt_; }
  const std::vector<TokenId>& last_reply() const { return last_reply_; }
  // Renders and tokenizes `messages` with the generation prompt (what send() submits).
  std::vector<TokenId> render_prompt(const nlohmann::ordered_json& messages) const;

 private:
  LLMEngine& engine_;
  const Tokenizer& tokenizer_;
  chat::ChatTemplate template_;
  ChatSessionOptions options_;
  chat::ChatTemplateOptions render_options_;
  nlohmann::ordered_json messages_;
  std::vector<TokenId> last_prompt_;
  std::vector<TokenId> last_reply_;
};

// An engine for one conversation: one sequence, a KV pool of exactly one context
// (max_model_len, default the model's), prefix caching on.
EngineConfig make_chat_engine_config(const Model& model, int64_t max_model_len, int num_threads);

// The chat template to use: `choice` is a built-in name (chatml, llama3, ...) or a Jinja file;
// empty means the model's own (tokenizer.chat_template). nullopt if empty and the model has none.
// Throws kestrel::Error for an unknown name / unreadable file, ChatTemplateError for bad syntax.
std::optional<chat::ChatTemplate> load_chat_template(const std::string& choice,
                                                     const gguf::GgufFile& file);

}  // namespace kestrel
