// kestrel chat MODEL: an interactive multi-turn conversation (like `ollama run` or llama.cpp's
// `llama-cli -cnv`). User turns come from stdin, one line each — after a "> " prompt on a
// terminal, plainly when piped (so scripts and tests can drive it); each reply streams to stdout
// and ends with a newline. /clear starts a new conversation, /exit or end of input ends.
// Ctrl-C during a reply stops that reply and returns to the prompt; the part already shown stays
// in the conversation as the assistant's turn (ChatSession::send says why). Ctrl-C at the prompt
// ends the chat, as end of input does (exit status 0: ending a chat is no failure).
// The session logic (rendering, KV reuse between turns) is engine/chat_session.h.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli_checks.h"
#include "chat/chat_template.h"
#include "commands.h"
#include "core/error.h"
#include "engine/chat_session.h"
#include "interrupt.h"
#include "kv_options.h"
#include "sampling_options.h"
#include "spec_options.h"
#include "parallel_options.h"
#include "server_options.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct ChatOptions {
  WeightMemory weights = WeightMemory::Auto;
  std::string model;
  std::string system_prompt;
  std::string chat_template;
  int64_t n_predict = 512;
  int threads = 0;
  int64_t ctx = 0;
  SamplingOptions sampling;
  KvOptions kv;
  SpecOptions spec;
  bool verbose = false;
};

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

// Lines from stdin, read with poll() so that Ctrl-C at the prompt ends the wait at once: a
// blocking read would miss a signal that lands just before it starts and wait for the next line.
class LineReader {
 public:
  enum class Result { Line, End, Interrupted };

  Result next(std::string& line) {
    while (true) {
      const size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return Result::Line;
      }
      if (eof_) {
        if (buffer_.empty()) return Result::End;
        line = std::move(buffer_);  // a last line without its newline
        buffer_.clear();
        return Result::Line;
      }
      if (interrupted()) return Result::Interrupted;
      pollfd fd{STDIN_FILENO, POLLIN, 0};
      if (::poll(&fd, 1, /*timeout_ms=*/100) <= 0) continue;  // timeout or EINTR: check the flag again
      char chunk[4096];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n > 0) {
        buffer_.append(chunk, size_t(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        eof_ = true;
      }
    }
  }

 private:
  std::string buffer_;
  bool eof_ = false;
};

void print_stats(int turn, const ChatTurnStats& s) {
  const int64_t computed = s.prompt_tokens - s.cached_tokens;
  const double prompt_rate = s.prompt_seconds > 0 ? double(computed) / s.prompt_seconds : 0.0;
  // The first token comes out of the prompt pass; the rest each cost one decode step.
  const double gen_rate = s.generated_tokens > 1 && s.generation_seconds > 0
                              ? double(s.generated_tokens - 1) / s.generation_seconds
                              : 0.0;
  fmt::print(stderr,
             "[turn {}: prompt {} tokens ({} reused, {} computed, {:.1f} tok/s); reply {} tokens, "
             "{:.1f} tok/s; {}]\n",
             turn, s.prompt_tokens, s.cached_tokens, computed, prompt_rate, s.generated_tokens, gen_rate,
             finish_reason_name(s.finish_reason));
}

void chat_loop(const ChatOptions& o) {
  const auto model = Model::load(o.model, {}, {.weights = o.weights});
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  std::optional<chat::ChatTemplate> chat_template = load_chat_template(o.chat_template, model->file());
  if (!chat_template) {
    fail("the model has no chat template (tokenizer.chat_template); pass --chat-template NAME|FILE "
         "(built-in: {})",
         fmt::join(chat::builtin_chat_template_names(), ", "));
  }
  EngineConfig config =
      make_chat_engine_config(*model, o.ctx, o.threads > 0 ? o.threads : default_thread_count());
  apply_kv_options(o.kv, config);
  std::unique_ptr<Model> draft;  // outlives the engine
  apply_spec_options(o.spec, *model, draft, config);
  check_kv_fits_memory(*model, config);
  LLMEngine engine(*model, config, tokenizer->stop_token_ids());
  ChatSessionOptions session_options;
  session_options.system_prompt = o.system_prompt;
  session_options.max_reply_tokens = o.n_predict;
  session_options.sampling = make_sampling_params(o.sampling);
  ChatSession session(engine, *tokenizer, std::move(*chat_template), session_options);

  const bool interactive = isatty(STDIN_FILENO) != 0;
  if (interactive) {
    fmt::print(stderr, "kestrel chat: context {} tokens. /clear starts a new conversation, Ctrl-C stops a "
                       "reply, /exit or Ctrl-D ends.\n",
               engine.max_model_len());
  }
  int turn = 0;
  std::string line;
  LineReader reader;
  InterruptGuard interrupt_guard;
  while (true) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (reader.next(line) != LineReader::Result::Line) break;  // end of input, or Ctrl-C at the prompt
    const std::string command = trim(line);
    if (command.empty()) continue;
    if (command == "/exit" || command == "/quit") break;
    if (command == "/clear") {
      session.clear();
      turn = 0;
      if (interactive) fmt::print(stderr, "(new conversation)\n");
      continue;
    }
    try {
      const ChatTurnStats stats = session.send(
          command,
          [](std::string_view text) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
          },
          interrupted);
      std::fputc('\n', stdout);
      std::fflush(stdout);
      const bool stopped = stats.finish_reason == FinishReason::Abort;
      const bool kept = !stopped || stats.generated_tokens > 0;
      if (kept) ++turn;
      if (o.verbose && kept) print_stats(turn, stats);
      if (stopped) {
        clear_interrupt();  // handled: the next Ctrl-C is a first one again (at the prompt: ends the chat)
        fmt::print(stderr, "kestrel: reply interrupted{}; Ctrl-C at the prompt or Ctrl-D ends the chat\n",
                   kept ? " (the part shown stays in the conversation)" : " before it began (message dropped)");
      }
      if (stats.context_full) {
        fmt::print(stderr, "kestrel: the reply was cut: the context ({} tokens) is full; /clear starts a "
                           "new conversation\n",
                   engine.max_model_len());
      }
    } catch (const ContextFullError& e) {
      fmt::print(stderr, "kestrel: {}; /clear starts a new conversation (or give a larger -c)\n", e.what());
    } catch (const Error& e) {
      // A template that rejects the conversation, say; the conversation is unchanged.
      fmt::print(stderr, "error: {}\n", e.what());
    }
  }
  if (interactive) std::fputc('\n', stdout);
}

}  // namespace

void register_chat(CLI::App& app) {
  auto options = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "interactive multi-turn chat (user turns from stdin)");
  cmd->add_option("model", options->model, "GGUF model file")->required();
  add_weight_memory_options(*cmd, options->weights);
  cmd->add_option("-s,--system", options->system_prompt, "system prompt");
  cmd->add_option("--chat-template", options->chat_template,
                  "built-in template name or a Jinja file (default: the model's own)");
  cmd->add_option("-n,--n-predict", options->n_predict, "most tokens per reply")->check(int_range(1, 1 << 24));
  cmd->add_option("-t,--threads", options->threads, "threads (default: the available CPUs)")->check(int_range(1, 1024));
  cmd->add_option("-c,--ctx", options->ctx, "context length (default: the model's)")->check(int_range(2, 1 << 24));
  add_sampling_options(*cmd, options->sampling);
  add_kv_options(*cmd, options->kv, /*with_sinks=*/false);
  add_spec_options(*cmd, options->spec);
  cmd->add_flag("--verbose", options->verbose,
                "per-turn statistics on stderr (prompt tokens, reused tokens, reply tokens, tok/s)");
  cmd->footer("Ctrl-C during a reply stops it (the part shown stays in the conversation); Ctrl-C at the prompt, "
              "/exit or end of input ends the chat.");
  cmd->callback([options] { chat_loop(*options); });
}

}  // namespace kestrel::cli
