// kestrel batch MODEL --input requests.jsonl --output results.jsonl: offline batch inference through
// the same engine as the server, at full throughput (all requests queued at once; the scheduler
// batches them). Input lines are OpenAI batch requests ({"custom_id", "url", "body"}) or bare
// completion/chat bodies; output lines follow OpenAI's batch output format, in input order.
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/async_engine.h"
#include "server/api_error.h"
#include "server/completion_run.h"
#include "server/openai_response.h"
#include "grammar_options.h"
#include "server_options.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

using json = nlohmann::ordered_json;

struct BatchOptions {
  std::string model;
  std::string input;
  std::string output;
  std::string chat_template;
  EngineOptions engine;
  GrammarOptions grammar;  // a constraint for the requests that bring none
};

struct Job {
  std::string custom_id;
  std::shared_ptr<server::ParsedRequest> request;
  std::unique_ptr<server::CompletionRun> run;
  std::vector<server::ChoiceResult> choices;
  int64_t cached = 0;
  json error;  // set when the line could not run
  bool done = false;
};

json output_line(const Job& job, const Tokenizer& tokenizer, const std::string& model_name, size_t index) {
  json line = {{"id", fmt::format("batch_req_{}", index)}, {"custom_id", job.custom_id}};
  if (!job.error.is_null()) {
    line["response"] = nullptr;
    line["error"] = job.error["error"];
    return line;
  }
  const json body = server::completion_response(*job.request, job.choices, tokenizer,
                                                fmt::format("cmpl-batch-{}", index), int64_t(std::time(nullptr)),
                                                model_name, job.run->prompt_tokens(), job.cached);
  line["response"] = {{"status_code", 200}, {"body", body}};
  line["error"] = nullptr;
  return line;
}

void batch(const BatchOptions& o) {
  std::ifstream in(o.input);
  if (!in) fail("{}: cannot read", o.input);
  const auto model = Model::load(o.model);
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  std::optional<chat::ChatTemplate> chat_template;
  if (!o.chat_template.empty()) {
    const auto builtin = chat::builtin_chat_template(o.chat_template);
    if (!builtin) fail("unknown built-in chat template '{}'", o.chat_template);
    chat_template = chat::ChatTemplate::parse(*builtin);
  } else if (auto embedded = model->file().get_string("tokenizer.chat_template")) {
    chat_template = chat::ChatTemplate::parse(*embedded);
  }
  AsyncEngineConfig config;
  config.engine = make_engine_config(o.engine, *model);
  std::unique_ptr<Model> draft;  // outlives the engine
  apply_spec_options(o.engine.spec, *model, draft, config.engine);
  config.max_queued_requests = int64_t(1) << 30;  // the whole file may queue at once
  AsyncEngine engine(*model, *tokenizer, config);
  const std::string model_name = std::filesystem::path(o.model).stem().string();

  const std::optional<grammar::Constraint> default_constraint = make_constraint(o.grammar);
  std::vector<Job> jobs;
  std::string text;
  size_t line_number = 0;
  while (std::getline(in, text)) {
    ++line_number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Job& job = jobs.emplace_back();
    job.custom_id = fmt::format("line-{}", line_number);
    try {
      json line;
      try {
        line = json::parse(text);
      } catch (const json::parse_error& e) {
        throw server::ApiError(400, fmt::format("line {}: malformed JSON: {}", line_number, e.what()));
      }
      json body = line.contains("body") ? line["body"] : line;
      if (line.contains("custom_id") && line["custom_id"].is_string()) job.custom_id = line["custom_id"];
      const std::string url = line.value("url", body.contains("messages") ? "/v1/chat/completions" : "/v1/completions");
      body["stream"] = false;
      job.request = std::make_shared<server::ParsedRequest>(
          url == "/v1/chat/completions"
              ? server::parse_chat_request(body, *tokenizer, chat_template ? &*chat_template : nullptr)
              : server::parse_completion_request(body, *tokenizer));
      // The command line's constraint applies to requests that bring none of their own.
      if (default_constraint && !job.request->structured.constraint) {
        job.request->structured.constraint = default_constraint;
        job.request->structured.constraint_param = "--json-schema/--grammar/--regex";
      }
      server::prepare_constraint(engine, *job.request, /*json_any_whitespace=*/true);
      job.run = std::make_unique<server::CompletionRun>(engine, *job.request);
      job.choices.resize(size_t(job.run->num_choices()));
    } catch (const server::ApiError& e) {
      job.error = server::error_json(e.status(), e.what(), e.type(), e.param(), e.code());
      job.done = true;
    }
  }

  ProgressBar progress("batch", int64_t(jobs.size()));
  size_t finished = 0;
  for (Job& job : jobs) {
    while (!job.done) {
      job.done = job.run->pump(std::chrono::milliseconds(200), [&](int choice, GenerationEvent& event) {
        server::ChoiceResult& c = job.choices[size_t(choice)];
        c.text += event.text;
        for (auto& t : event.tokens) c.tokens.push_back(std::move(t));
        c.completion_tokens = event.completion_tokens;
        if (event.finished) {
          c.finish_reason = event.finish_reason;
          c.error = event.error;
          if (choice % job.request->n == 0) job.cached += event.cached_prompt_tokens;
        }
      });
    }
    progress.update(int64_t(++finished));
  }
  progress.finish();

  const std::string tmp = o.output + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) fail("{}: cannot create", tmp);
    for (size_t i = 0; i < jobs.size(); ++i) {
      out << server::dump_json(output_line(jobs[i], *tokenizer, model_name, i)) << "\n";
    }
    if (!out) fail("{}: write failed", tmp);
  }
  if (std::rename(tmp.c_str(), o.output.c_str()) != 0) fail("{}: cannot rename to {}", tmp, o.output);
  const MetricsSnapshot m = engine.metrics();
  fmt::print(stderr, "batch: {} requests, {} prompt tokens, {} generated tokens -> {}\n", jobs.size(),
             m.prompt_tokens, m.generation_tokens, o.output);
}

}  // namespace

void register_batch(CLI::App& app) {
  auto options = std::make_shared<BatchOptions>();
  CLI::App* cmd = app.add_subcommand("batch", "run a JSONL file of requests offline");
  cmd->add_option("model", options->model, "GGUF model file")->required();
  cmd->add_option("-i,--input", options->input, "requests, one JSON object per line")->required();
  cmd->add_option("-o,--output", options->output, "results, one JSON object per line")->required();
  cmd->add_option("--chat-template", options->chat_template, "built-in chat template name");
  add_engine_options(*cmd, options->engine);
  add_grammar_options(*cmd, options->grammar);
  cmd->callback([options] { batch(*options); });
}

}  // namespace kestrel::cli
