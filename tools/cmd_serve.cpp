// kestrel serve MODEL: the OpenAI-compatible HTTP server.
#include <atomic>
#include <chrono>
#include <csignal>
#include <sys/resource.h>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "chat/chat_template.h"
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "engine/async_engine.h"
#include "engine/chat_session.h"
#include "server/http_server.h"
#include "parallel_options.h"
#include "server_options.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

// A duration option given in seconds (fractions allowed), range-checked.
void add_seconds_option(CLI::App& cmd, const std::string& name, std::chrono::milliseconds& target, double lo,
                        double hi, const std::string& help) {
  cmd.add_option_function<double>(
         name, [&target](double seconds) { target = std::chrono::milliseconds(int64_t(seconds * 1000.0 + 0.5)); },
         fmt::format("{} (default {:g})", help, double(target.count()) / 1000.0))
      ->check(number_range(lo, hi));
}

struct ServeOptions {
  std::string model;
  EngineOptions engine;
  server::ServerOptions http;
  std::string chat_template;
  std::string served_name;
  int64_t max_queue = 256;
  ParallelOptions parallel;
};

void serve_root(ServeOptions& o, const Model& loaded, ParallelContext& parallel) {
  const Model* const model = &loaded;
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const std::optional<chat::ChatTemplate> chat_template = load_chat_template(o.chat_template, model->file());

  // Every connection is a file descriptor: take the whole allowance the system grants.
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }

  // Block the stop signals in every thread; one thread waits for them and stops the server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  AsyncEngineConfig config;
  config.engine = make_engine_config(o.engine, *model);
  config.engine.parallel = &parallel;
  std::unique_ptr<Model> draft;  // outlives the engine
  apply_spec_options(o.engine.spec, *model, draft, config.engine);
  config.max_queued_requests = o.max_queue;
  std::atomic<server::HttpServer*> http_server{nullptr};
  config.on_group_failure = [&http_server] {
    // The requests in flight have their errors; drain their responses and stop.
    if (server::HttpServer* server = http_server.load()) server->shutdown();
  };
  AsyncEngine engine(*model, *tokenizer, config);
  o.http.model_name = !o.served_name.empty() ? o.served_name
                                             : std::filesystem::path(o.model).stem().string();
  server::HttpServer http(engine, chat_template ? &*chat_template : nullptr, o.http);
  http_server.store(&http);
  const int port = http.bind();
  fmt::print(stderr, "kestrel: serving '{}' on http://{}:{} (context {}{})\n", o.http.model_name, o.http.host,
             port, engine.max_request_tokens(), chat_template ? "" : ", no chat template");
  fmt::print(stderr, "kestrel: {}\n", describe(engine.kv_capacity()));
  if (engine.speculative()) {
    const SpecConfig& spec = config.engine.spec;
    fmt::print(stderr, "kestrel: speculative decoding: {}{}, up to {} draft tokens per step, {}\n",
               spec_method_name(spec.method), spec.method == SpecMethod::DraftModel ? " model " + o.engine.spec.draft_model : "",
               spec.num_spec_tokens, spec.adaptive ? "adaptive" : "fixed");
  }
  if (config.engine.enable_prefix_caching && !engine.prefix_caching()) {
    fmt::print(stderr, "kestrel: prefix caching is off: this model's sliding-window layers free "
                       "their out-of-window KV blocks (--keep-window-blocks keeps them and turns it on)\n");
  }
  std::fflush(stderr);
  // The first SIGINT/SIGTERM drains: no new connections, running requests get up to
  // --shutdown-timeout; a second one ends them at once.
  std::atomic<bool> served{false};
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    if (served.load()) return;
    fmt::print(stderr, "kestrel: shutting down: running requests have {:.0f} s to finish (signal again to end them now)\n",
               std::chrono::duration<double>(o.http.shutdown_timeout).count());
    http.shutdown();
    sigwait(&signals, &signal);
    if (served.load()) return;
    fmt::print(stderr, "kestrel: ending running requests now\n");
    http.abort();
  });
  http.serve();
  served.store(true);
  // serve() also returns if the listener fails; wake the signal thread so it ends too.
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  if (const std::optional<std::string> failure = engine.group_failure()) {
    // Fail-stop: the requests in flight have had their errors; end every rank.
    throw GroupFailure(*failure);
  }
  fmt::print(stderr, "kestrel: stopped\n");
}

void serve(ServeOptions& o) {
  GroupMember member = join_group(o.parallel, o.model);
  if (!member.is_root()) return run_worker_rank(member, o.engine.threads, o.engine.kv);
  run_root_rank(member, [&] { serve_root(o, *member.model, *member.parallel); });
}

}  // namespace

void register_serve(CLI::App& app) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  cmd->add_option("model", options->model, "GGUF model file")->required();
  cmd->add_option("--host", options->http.host, "address to listen on");
  cmd->add_option("--port", options->http.port, "port (0: any free port)")->check(int_range(0, 65535));
  cmd->add_option("--api-key", options->http.api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--served-model-name", options->served_name, "model id in the API (default: file name)");
  cmd->add_option("--chat-template", options->chat_template,
                  "built-in template name or a Jinja file (default: the model's own)");
  cmd->add_option("--max-queue", options->max_queue, "queued requests beyond which new ones get 503")
      ->check(int_range(1, 1 << 20));
  server::HttpLimits& limits = options->http.limits;
  cmd->add_option("--max-body-bytes", limits.max_body_bytes, "larger request bodies get 413")
      ->check(int_range(1, int64_t(1) << 34));
  cmd->add_flag_function("--compact-json", [o = options.get()](int64_t) { o->http.json_any_whitespace = false; },
                "structured output's JSON without free whitespace (vLLM's disable_any_whitespace; a request can still ask)");
  add_seconds_option(*cmd, "--shutdown-timeout", options->http.shutdown_timeout, 0, 86400,
                     "on SIGTERM/SIGINT, seconds running requests may go on before they are ended");
  add_seconds_option(*cmd, "--head-timeout", limits.head_timeout, 0.1, 3600,
                     "seconds a client has to send a request line and headers, in all");
  add_seconds_option(*cmd, "--body-timeout", limits.body_timeout, 0.1, 3600, "seconds a client has to send a body");
  add_seconds_option(*cmd, "--keep-alive-timeout", limits.idle_timeout, 0, 3600,
                     "seconds an idle kept-alive connection stays open");
  add_seconds_option(*cmd, "--write-timeout", limits.write_timeout, 0.1, 3600,
                     "seconds a write to a client may take before the client counts as gone");
  cmd->add_option("--max-connections", limits.max_connections,
                  "connections open at once; at the cap the oldest one still sending its request is closed")
      ->check(int_range(1, 1 << 20));
  cmd->add_option("--max-connections-per-client", limits.max_connections_per_client,
                  "connections open at once from one address (same rule)")
      ->check(int_range(1, 1 << 20));
  add_engine_options(*cmd, options->engine);
  add_parallel_options(*cmd, options->parallel);
  cmd->callback([options] { serve(*options); });
}

}  // namespace kestrel::cli
