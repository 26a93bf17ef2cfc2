#include "engine/chat_session.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "loader/gguf_reader.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

std::tm local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

double seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

ChatSession::ChatSession(LLMEngine& engine, const Tokenizer& tokenizer, chat::ChatTemplate chat_template,
                         ChatSessionOptions options)
    : engine_(engine), tokenizer_(tokenizer), template_(std::move(chat_template)), options_(std::move(options)) {
  // The special tokens as the server passes them, so both render a conversation alike.
  const VocabData& vocab = tokenizer_.vocab();
  if (vocab.bos_id >= 0) render_options_.bos_token = tokenizer_.token_to_piece(vocab.bos_id, true);
  if (vocab.eos_id >= 0) render_options_.eos_token = tokenizer_.token_to_piece(vocab.eos_id, true);
  clear();
}

void ChatSession::clear() {
  messages_ = json::array();
  if (!options_.system_prompt.empty()) {
    messages_.push_back({{"role", "system"}, {"content", options_.system_prompt}});
  }
  // Templates that print today's date (Llama 3) must print the same date on every turn of a
  // conversation, or a conversation crossing midnight would lose its cached prefix.
  render_options_.now = local_now();
  last_prompt_.clear();
  last_reply_.clear();
}

std::vector<TokenId> ChatSession::render_prompt(const json& messages) const {
  chat::ChatTemplateOptions options = render_options_;
  options.add_generation_prompt = true;
  const std::string text = template_.render(messages, options);
  // The template writes BOS itself when the model wants one (as in the server).
  return tokenizer_.encode(text, /*add_special=*/false, /*parse_special=*/true);
}

ChatTurnStats ChatSession::send(std::string_view user_message, const TextSink& on_text, const StopCheck& should_stop) {
  json messages = messages_;
  messages.push_back({{"role", "user"}, {"content", std::string(user_message)}});
  // The whole conversation is rendered and tokenized again rather than extended token by token:
  // the prompt is then exactly what the server (and transformers) would build for it. When the
  // template renders history as it rendered the last prompt plus the reply (chatml, llama3 ...),
  // the new prompt starts with the previous prompt + reply ids and the prefix cache covers all
  // their full blocks. Where it does not — a template that trims or rewrites earlier turns, or a
  // reply whose text tokenizes differently from the ids the model sampled — reuse still covers
  // every full block before the first differing token, which is fine: only the tail is recomputed.
  std::vector<TokenId> prompt = render_prompt(messages);
  if (prompt.empty()) fail("the chat template rendered an empty prompt");

  ChatTurnStats stats;
  stats.prompt_tokens = int64_t(prompt.size());
  const int64_t context = engine_.max_model_len();
  const int64_t room = context - stats.prompt_tokens;
  if (room < 1) {
    throw ContextFullError(fmt::format(
        "the conversation is {} tokens with this message, but the context holds {}",
        stats.prompt_tokens, context));
  }

  RequestSpec spec;
  spec.prompt = prompt;
  spec.sampling = options_.sampling;
  spec.max_tokens = std::min(options_.max_reply_tokens, room);
  const RequestId id = engine_.add_request(spec);

  StreamingDetokenizer detokenizer(tokenizer_);
  detokenizer.prime(prompt.back());
  std::string reply_text;
  std::vector<TokenId> reply;
  const auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    reply_text += text;
    if (on_text) on_text(text);
  };
  const auto start = Clock::now();
  auto first_token = start;
  bool done = false;
  try {
    while (!done && engine_.has_unfinished()) {
      if (should_stop && should_stop()) {
        engine_.abort_request(id);
        stats.finish_reason = FinishReason::Abort;
        break;
      }
      for (const RequestOutput& out : engine_.step()) {
        if (out.id != id) continue;
        stats.cached_tokens = out.num_cached_tokens;
        for (const SampleResult& sample : out.new_tokens) {
          if (stats.generated_tokens++ == 0) first_token = Clock::now();
          // The engine ends the request at EOS and at every end-of-turn token (<|im_end|>,
          // <|eot_id|>, <end_of_turn>); none is part of the reply's text: the template writes the
          // turn's end itself.
          if (tokenizer_.is_end_of_generation(sample.token)) {
            if (!out.finished) engine_.finish_request(id, FinishReason::Stop);
            stats.finish_reason = FinishReason::Stop;
            done = true;
            break;
          }
          reply.push_back(sample.token);
          emit(detokenizer.push(sample.token));
        }
        if (out.finished && !done) {
          stats.finish_reason = out.finish_reason;
          done = true;
        }
      }
    }
  } catch (...) {
    engine_.finish_all(FinishReason::Error);  // frees the request's blocks; history unchanged
    throw;
  }
  emit(detokenizer.flush());
  const auto end = Clock::now();
  stats.prompt_seconds = seconds(start, first_token);
  stats.generation_seconds = seconds(first_token, end);
  stats.context_full = stats.finish_reason == FinishReason::Length &&
                       stats.prompt_tokens + stats.generated_tokens >= context;

  if (stats.finish_reason == FinishReason::Abort && reply.empty()) return stats;  // nothing to keep
  messages.push_back({{"role", "assistant"}, {"content", reply_text}});
  messages_ = std::move(messages);
  last_prompt_ = std::move(prompt);
  last_reply_ = std::move(reply);
  return stats;
}

EngineConfig make_chat_engine_config(const Model& model, int64_t max_model_len, int num_threads) {
  EngineConfig config;
  config.num_threads = num_threads;
  config.max_model_len = max_model_len > 0 ? max_model_len : model.config().n_ctx_train;
  // One sequence: exactly the blocks of one full context. Blocks of earlier turns stay cached in
  // the free pool until a longer conversation needs them back.
  config.num_kv_blocks = (config.max_model_len + config.block_size - 1) / config.block_size;
  config.max_num_seqs = 1;
  config.enable_prefix_caching = true;
  // Prefix caching needs every layer's K/V for the reused positions, so sliding-window layers
  // (Gemma 3, Mistral) keep their out-of-window blocks here: for one conversation that costs at
  // most one context of KV per layer, and buys reuse across turns. (The window is still applied
  // in attention; freeing is only a memory saving.)
  config.free_out_of_window_blocks = false;
  return config;
}

std::optional<chat::ChatTemplate> load_chat_template(const std::string& choice, const gguf::GgufFile& file) {
  std::string source;
  if (!choice.empty()) {
    if (auto builtin = chat::builtin_chat_template(choice)) {
      source = *builtin;
    } else if (std::filesystem::is_regular_file(choice)) {
      std::ifstream in(choice, std::ios::binary);
      if (!in) fail("cannot open the chat template file '{}'", choice);
      std::stringstream ss;
      ss << in.rdbuf();
      source = ss.str();
    } else {
      fail("--chat-template '{}' is neither a built-in template ({}) nor a file", choice,
           fmt::join(chat::builtin_chat_template_names(), ", "));
    }
  } else if (auto embedded = file.get_string("tokenizer.chat_template")) {
    source = *embedded;
  } else {
    return std::nullopt;
  }
  return chat::ChatTemplate::parse(source);
}

}  // namespace kestrel
