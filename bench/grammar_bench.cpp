// Structured output's costs and validity on a real model, over a set of JSON schemas
// (bench/data/json_schemas.json):
//   1. compile: time to compile each schema for the model's vocabulary (one thread), and again
//      from the cache;
//   2. generate: every schema x --samples requests at temperature 1.0 through one engine
//      (--concurrency at a time), outputs written as JSON lines for bench/validate_json_outputs.py;
//   3. mask: the generated token sequences replayed through a fresh matcher, timing each token's
//      mask (sync + fill + apply to a logits row), one thread;
//   4. speed: decode tok/s with the schema (without and with jump-forward) and without it, at
//      batch 1 and at --concurrency, alternating the three, median of the per-round ratios.
//   grammar_bench MODEL [--schemas FILE] [--samples 10] [--concurrency 16] [--max-tokens 256]
//                 [--out FILE] [--threads N] [--rounds 3] [--compile-threads 1]
//                 [--compile-only | --speed-only]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "engine/chat_session.h"
#include "engine/engine.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

struct Job {
  size_t schema;
  std::vector<TokenId> prompt;
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // null: unconstrained
  uint64_t seed;
  int max_tokens = 0;       // 0: the run's
  bool ignore_eos = false;  // unconstrained twins generate exactly as many tokens
};

struct Done {
  std::vector<TokenId> tokens;
  FinishReason finish = FinishReason::None;
};

struct RunStats {
  std::vector<Done> outputs;
  int64_t tokens = 0;
  double seconds = 0.0;  // from the first step to the last
};

// All jobs through one engine, `concurrency` sequences at a time.
RunStats run_jobs(const Model& model, const Tokenizer& tokenizer, const std::vector<Job>& jobs, int concurrency,
                  int max_tokens, int threads, bool jump_forward = true) {
  EngineConfig config;
  config.grammar_jump_forward = jump_forward;
  config.num_threads = threads;
  config.max_model_len = 2048;
  config.max_num_seqs = concurrency;
  config.kv_memory_bytes = int64_t(concurrency) * 2048 * 24 * 1024 + (int64_t(64) << 20);
  LLMEngine engine(model, config, tokenizer.stop_token_ids());
  std::map<RequestId, size_t> index;
  RunStats stats;
  stats.outputs.resize(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    RequestSpec spec;
    spec.prompt = jobs[i].prompt;
    spec.max_tokens = jobs[i].max_tokens > 0 ? jobs[i].max_tokens : max_tokens;
    spec.ignore_eos = jobs[i].ignore_eos;
    spec.sampling.temperature = 1.0f;
    spec.sampling.top_k = 0;
    spec.sampling.top_p = 1.0f;
    spec.sampling.seed = jobs[i].seed;
    spec.grammar = jobs[i].grammar;
    index[engine.add_request(spec)] = i;
  }
  const auto start = Clock::now();
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      Done& d = stats.outputs[index[out.id]];
      for (const SampleResult& s : out.new_tokens) d.tokens.push_back(s.token);
      stats.tokens += int64_t(out.new_tokens.size());
      if (out.finished) d.finish = out.finish_reason;
    }
  }
  stats.seconds = seconds_since(start);
  return stats;
}

void generate_and_replay(const Model& m, const Tokenizer& tok, const json& schemas, const std::vector<Job>& jobs,
                         int concurrency, int max_tokens, int threads, const std::string& out_path);
void speed(const Model& m, const Tokenizer& tok, size_t num_schemas, const std::vector<Job>& jobs, int samples,
           int concurrency, int max_tokens, int threads, int rounds);

int bench(int argc, char** argv) {
  CLI::App app{"structured output: compile and mask cost, validity, speed"};
  std::string model_path, schemas_path = "bench/data/json_schemas.json", out_path = "grammar_bench_outputs.jsonl";
  int samples = 10, concurrency = 16, max_tokens = 256, threads = 2, rounds = 3;
  bool speed_only = false, compile_only = false;
  int compile_threads = 1, max_whitespace = grammar::Constraint{}.max_whitespace;
  bool compile_detail = false;
  app.add_option("model", model_path, "GGUF model")->required();
  app.add_option("--schemas", schemas_path, "JSON list of {name, schema}");
  app.add_option("--samples", samples, "generations per schema");
  app.add_option("--concurrency", concurrency, "sequences in flight");
  app.add_option("--max-tokens", max_tokens, "per generation");
  app.add_option("--out", out_path, "generated outputs (JSON lines)");
  app.add_option("--threads", threads, "engine threads");
  app.add_option("--rounds", rounds, "alternations for the speed comparison");
  app.add_flag("--speed-only", speed_only, "only the speed comparison (step 4)");
  app.add_flag("--compile-only", compile_only, "only the compile times (step 1)");
  app.add_option("--compile-threads", compile_threads, "threads a compilation uses (the server uses 2)");
  app.add_option("--max-whitespace", max_whitespace, "whitespace run allowed between JSON tokens (<= 0: unbounded)");
  app.add_flag("--compile-detail", compile_detail, "print each schema's compile time, slowest first");
  CLI11_PARSE(app, argc, argv);

  const auto model = Model::load(model_path);
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const json schemas = json::parse(std::ifstream(schemas_path));
  std::optional<chat::ChatTemplate> chat_template = load_chat_template("", model->file());
  fmt::print("model {} (vocabulary {}), {} schemas\n", model_path, model->config().n_vocab, schemas.size());

  // 1. Compile (one thread), then from the cache.
  auto t0 = Clock::now();
  grammar::GrammarCompiler compiler(*tokenizer, model->config().n_vocab, tokenizer->stop_token_ids(), compile_threads);
  fmt::print("vocabulary indexed in {:.0f} ms\n", 1e3 * seconds_since(t0));
  std::vector<std::shared_ptr<const grammar::CompiledGrammar>> compiled;
  std::vector<double> compile_ms, cached_ms;
  for (const json& entry : schemas) {
    grammar::Constraint c;
    c.kind = grammar::ConstraintKind::JsonSchema;
    c.text = entry["schema"].dump();
    c.max_whitespace = max_whitespace;
    t0 = Clock::now();
    compiled.push_back(compiler.compile(c));
    compile_ms.push_back(1e3 * seconds_since(t0));
    t0 = Clock::now();
    (void)compiler.compile(c);
    cached_ms.push_back(1e3 * seconds_since(t0));
  }
  fmt::print("compile ({} thread(s)): p50 {:.1f} ms, p90 {:.1f} ms, max {:.1f} ms; cached p50 {:.3f} ms\n", compile_threads,
             percentile(compile_ms, 0.5), percentile(compile_ms, 0.9), percentile(compile_ms, 1.0), percentile(cached_ms, 0.5));
  if (compile_detail) {
    std::vector<size_t> order(schemas.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return compile_ms[a] > compile_ms[b]; });
    for (const size_t i : order) fmt::print("  {:8.1f} ms  {}\n", compile_ms[i], schemas[i]["name"].get<std::string>());
  }
  if (compile_only) return 0;

  // 2. Generate.
  std::vector<Job> jobs;
  for (size_t i = 0; i < schemas.size(); ++i) {
    const std::string request = fmt::format("Write one JSON object ({}) that matches this JSON Schema, with realistic values:\n{}",
                                            schemas[i]["name"].get<std::string>(), schemas[i]["schema"].dump());
    std::string prompt = request;
    if (chat_template) {
      chat::ChatTemplateOptions options;
      prompt = chat_template->render(json::array({{{"role", "user"}, {"content", request}}}), options);
    }
    const std::vector<TokenId> tokens = tokenizer->encode(prompt, !chat_template.has_value(), true);
    for (int s = 0; s < samples; ++s) jobs.push_back({i, tokens, compiled[i], uint64_t(1000 * i + size_t(s))});
  }
  if (!speed_only) generate_and_replay(*model, *tokenizer, schemas, jobs, concurrency, max_tokens, threads, out_path);
  speed(*model, *tokenizer, schemas.size(), jobs, samples, concurrency, max_tokens, threads, rounds);
  return 0;
}

void generate_and_replay(const Model& m, const Tokenizer& tok, const json& schemas, const std::vector<Job>& jobs,
                         int concurrency, int max_tokens, int threads, const std::string& out_path) {
  const Model* model = &m;
  const Tokenizer* tokenizer = &tok;
  const RunStats gen = run_jobs(*model, *tokenizer, jobs, concurrency, max_tokens, threads);
  std::ofstream out(out_path);
  int stopped = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Done& d = gen.outputs[j];
    stopped += d.finish == FinishReason::Stop;
    out << json{{"schema", schemas[jobs[j].schema]["name"]}, {"finish", finish_reason_name(d.finish)},
                {"text", tokenizer->decode(d.tokens, false)}}.dump(-1, ' ', false, json::error_handler_t::replace)
        << "\n";
  }
  fmt::print("generate: {} outputs ({} ended by a stop token), {} tokens in {:.1f} s ({:.1f} tok/s at {} in flight) -> {}\n",
             jobs.size(), stopped, gen.tokens, gen.seconds, double(gen.tokens) / gen.seconds, concurrency, out_path);

  // 3. Mask cost, replaying the outputs (one thread).
  std::vector<double> mask_us;
  std::vector<float> row(size_t(model->config().n_vocab));
  for (size_t j = 0; j < jobs.size(); ++j) {
    grammar::GrammarMaskProcessor processor(jobs[j].grammar, jobs[j].prompt.size());
    std::vector<TokenId> history = jobs[j].prompt;
    for (TokenId t : gen.outputs[j].tokens) {
      std::fill(row.begin(), row.end(), 0.0f);
      const auto t0 = Clock::now();
      processor.apply(row, history);
      mask_us.push_back(1e6 * seconds_since(t0));
      history.push_back(t);
    }
  }
  fmt::print("mask per token ({} tokens): p50 {:.1f} us, p90 {:.1f} us, p99 {:.1f} us, max {:.1f} us\n", mask_us.size(),
             percentile(mask_us, 0.5), percentile(mask_us, 0.9), percentile(mask_us, 0.99), percentile(mask_us, 1.0));
}

void speed(const Model& m, const Tokenizer& tok, size_t num_schemas, const std::vector<Job>& jobs, int samples,
           int concurrency, int max_tokens, int threads, int rounds) {
  const Model* model = &m;
  const Tokenizer* tokenizer = &tok;

  // 4. Speed: constrained vs unconstrained, alternating, at batch 1 and at `concurrency`.
  for (const int batch : {1, concurrency}) {
    std::vector<Job> subset;
    for (size_t i = 0; i < std::min<size_t>(size_t(batch == 1 ? 4 : concurrency), num_schemas); ++i) {
      subset.push_back(jobs[i * size_t(samples)]);
    }
    std::vector<double> ratios, jump_ratios;
    // The unconstrained twins: same prompts and seeds, exactly as many tokens per request as the
    // constrained run made (so the batch shrinks alike and prefill is amortised alike).
    const RunStats lengths = run_jobs(*model, *tokenizer, subset, batch, max_tokens, threads, /*jump_forward=*/false);
    std::vector<Job> free_jobs = subset;
    for (size_t j = 0; j < free_jobs.size(); ++j) {
      free_jobs[j].grammar = nullptr;
      free_jobs[j].ignore_eos = true;
      free_jobs[j].max_tokens = std::max<int>(1, int(lengths.outputs[j].tokens.size()));
    }
    for (int r = 0; r < rounds; ++r) {
      // The order alternates between rounds (machine drift must not favour one side).
      RunStats constrained, jumping, unconstrained;
      if (r % 2 == 1) unconstrained = run_jobs(*model, *tokenizer, free_jobs, batch, max_tokens, threads);
      constrained = run_jobs(*model, *tokenizer, subset, batch, max_tokens, threads, /*jump_forward=*/false);
      jumping = run_jobs(*model, *tokenizer, subset, batch, max_tokens, threads, /*jump_forward=*/true);
      if (r % 2 == 0) unconstrained = run_jobs(*model, *tokenizer, free_jobs, batch, max_tokens, threads);
      const double c = double(constrained.tokens) / constrained.seconds, u = double(unconstrained.tokens) / unconstrained.seconds;
      const double jf = double(jumping.tokens) / jumping.seconds;
      ratios.push_back(c / u);
      jump_ratios.push_back(jf / u);
      fmt::print("  batch {:2d} round {}: constrained {:.1f} tok/s ({} tokens, {:.2f} s), with jump-forward {:.1f} tok/s ({} tokens), "
                 "unconstrained {:.1f} tok/s ({} tokens)\n",
                 batch, r + 1, c, constrained.tokens, constrained.seconds, jf, jumping.tokens, u, unconstrained.tokens);
    }
    fmt::print("speed at batch {}: constrained / unconstrained tok/s, median of {} rounds: {:.3f}; with jump-forward: {:.3f}\n",
               batch, rounds, percentile(ratios, 0.5), percentile(jump_ratios, 0.5));
  }
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  try {
    return kestrel::bench(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
