// kestrel batch MODEL --input requests.jsonl --output results.jsonl: offline batch inference through
// the same engine as the server, at full throughput (all requests queued at once; the scheduler
// batches them). Input lines are OpenAI batch requests ({"custom_id", "url", "body"}) or bare
// completion/chat bodies; output lines follow OpenAI's batch output format, in input order.
// The input is checked before the model loads: a missing, empty or directory path, a file of
// blank lines, or two lines with the same custom_id (the output could not tell them apart) is an
// error; a line that is not valid JSON or not a valid request gets an error line in the output.
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_checks.h"
#include "chat/chat_template.h"
#include "commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/async_engine.h"
#include "server/api_error.h"
#include "server/completion_run.h"
#include "server/openai_response.h"
#include "grammar_options.h"
#include "parallel_options.h"
#include "server_options.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

using json = nlohmann::ordered_json;

struct BatchOptions {
  WeightMemory weights = WeightMemory::Auto;
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

// One non-blank input line: its JSON (or why it is not JSON) and the custom_id it answers to.
struct InputLine {
  size_t number = 0;
  json value;
  std::string parse_error;
  std::string custom_id;
};

std::vector<InputLine> read_input(const std::string& path) {
  const std::string text = read_input_file(path, "--input");
  std::vector<InputLine> lines;
  std::map<std::string, size_t> first_line;  // custom_id -> the line that used it first
  size_t number = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view raw(text.data() + start, end - start);
    start = end + 1;
    ++number;
    if (raw.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    InputLine& line = lines.emplace_back();
    line.number = number;
    line.custom_id = fmt::format("line-{}", number);  // what a line without custom_id answers to
    try {
      line.value = json::parse(raw);
    } catch (const json::parse_error& e) {
      line.parse_error = e.what();
    }
    if (line.value.is_object() && line.value.contains("custom_id") && line.value["custom_id"].is_string()) {
      line.custom_id = line.value["custom_id"];
    }
    const auto [it, fresh] = first_line.emplace(line.custom_id, number);
    if (!fresh) fail("--input {}: custom_id '{}' is on line {} and line {}", path, line.custom_id, it->second, number);
  }
  if (lines.empty()) fail("--input {}: no requests (every line is blank)", path);
  return lines;
}

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
  const std::vector<InputLine> input = read_input(o.input);
  std::error_code ec;
  if (std::filesystem::is_directory(o.output, ec)) fail("--output {}: is a directory, not a file", o.output);
  const auto model = Model::load(o.model, {}, {.weights = o.weights});
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
  for (const InputLine& in : input) {
    Job& job = jobs.emplace_back();
    job.custom_id = in.custom_id;
    try {
      if (!in.parse_error.empty()) {
        throw server::ApiError(400, fmt::format("line {}: malformed JSON: {}", in.number, in.parse_error));
      }
      const json& line = in.value;
      if (!line.is_object()) throw server::ApiError(400, fmt::format("line {}: not a JSON object", in.number));
      json body = line.contains("body") ? line["body"] : line;
      if (!line.contains("body")) {
        // A bare body carries the batch envelope's fields beside the request's: they are not
        // request fields (the parser refuses unknown ones).
        for (const char* envelope : {"custom_id", "url", "method"}) body.erase(envelope);
      }
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
    } catch (const json::exception& e) {
      // A field of the wrong JSON type ("url": 5, "body": []): this line's error, not the batch's.
      const server::ApiError error(400, fmt::format("line {}: {}", in.number, e.what()));
      job.error = server::error_json(error.status(), error.what(), error.type(), error.param(), error.code());
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
  add_weight_memory_options(*cmd, options->weights);
  cmd->add_option("-i,--input", options->input, "requests, one JSON object per line")->required()->check(existing_file());
  cmd->add_option("-o,--output", options->output, "results, one JSON object per line")->required();
  cmd->add_option("--chat-template", options->chat_template, "built-in chat template name");
  add_engine_options(*cmd, options->engine);
  add_grammar_options(*cmd, options->grammar);
  cmd->callback([options] { batch(*options); });
}

}  // namespace kestrel::cli
