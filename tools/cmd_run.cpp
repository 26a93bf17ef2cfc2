// kestrel run MODEL -p PROMPT -n N: streams the generated text (not the prompt) to stdout and ends
// with one timing line on stderr.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "sampling_options.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  int n_predict = 128;
  int threads = 0;
  int64_t ctx = 0;
  SamplingOptions sampling;
  bool ignore_eos = false;
};

void run(const RunOptions& o) {
  const auto model = Model::load(o.model);
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  std::vector<TokenId> prompt = tokenizer->encode(o.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (prompt.empty()) fail("the prompt is empty and the model adds no BOS token");

  EngineConfig config;
  config.num_threads = o.threads > 0 ? o.threads : default_thread_count();
  config.max_model_len = o.ctx > 0 ? o.ctx : model->config().n_ctx_train;
  // One sequence: the pool needs exactly the blocks of one full context.
  config.num_kv_blocks = (config.max_model_len + config.block_size - 1) / config.block_size;
  config.max_num_seqs = 1;
  LLMEngine engine(*model, config, tokenizer->eos_id());

  RequestSpec spec;
  spec.prompt = prompt;
  spec.max_tokens = o.n_predict;
  spec.ignore_eos = o.ignore_eos;
  spec.sampling = make_sampling_params(o.sampling);
  engine.add_request(spec);

  StreamingDetokenizer detokenizer(*tokenizer);
  detokenizer.prime(prompt.back());
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto first_token_time = start;
  int64_t generated = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      for (const SampleResult& sample : out.new_tokens) {
        if (generated++ == 0) first_token_time = Clock::now();
        if (tokenizer->is_end_of_generation(sample.token) && !o.ignore_eos) continue;
        const std::string text = detokenizer.push(sample.token);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      }
    }
  }
  const std::string rest = detokenizer.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const auto end = Clock::now();
  const double prompt_seconds = std::chrono::duration<double>(first_token_time - start).count();
  const double gen_seconds = std::chrono::duration<double>(end - first_token_time).count();
  // The first generated token comes out of the prompt pass; the rest each cost one decode step.
  const double gen_rate = generated > 1 && gen_seconds > 0 ? double(generated - 1) / gen_seconds : 0.0;
  std::fprintf(stderr, "prompt: %zu tokens, %.1f tok/s; generation: %lld tokens, %.1f tok/s\n",
               prompt.size(), prompt_seconds > 0 ? double(prompt.size()) / prompt_seconds : 0.0,
               (long long)generated, gen_rate);
}

}  // namespace

void register_run(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
  cmd->add_option("model", options->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", options->prompt, "prompt text (special tokens such as <s> are parsed)");
  cmd->add_option("-n,--n-predict", options->n_predict, "tokens to generate")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("-t,--threads", options->threads, "threads (default: all cores)")->check(CLI::Range(1, 1024));
  cmd->add_option("-c,--ctx", options->ctx, "context length (default: the model's)")->check(CLI::Range(2, 1 << 24));
  add_sampling_options(*cmd, options->sampling);
  cmd->add_flag("--ignore-eos", options->ignore_eos, "keep generating after end-of-text");
  cmd->callback([options] { run(*options); });
}

int default_thread_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

}  // namespace kestrel::cli
