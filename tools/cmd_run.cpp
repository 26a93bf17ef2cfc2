// kestrel run MODEL -p PROMPT -n N: streams the generated text (not the prompt) to stdout and ends
// with one timing line on stderr. Ctrl-C stops generating: what was generated stays printed, the
// timing line still comes (as llama-cli prints its timings), and the exit status is 130, so a
// script can tell a cut text from a finished one. A second Ctrl-C exits at once.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/kv_capacity.h"
#include "grammar_options.h"
#include "interrupt.h"
#include "kv_options.h"
#include "parallel_options.h"
#include "server_options.h"
#include "sampling_options.h"
#include "spec_options.h"
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
  KvOptions kv;
  SpecOptions spec;
  GrammarOptions grammar;
  bool no_jump_forward = false;
  bool ignore_eos = false;
  bool timings = false;
  ParallelOptions parallel;
};

void generate(const RunOptions& o, const Model& loaded, ParallelContext& parallel) {
  const Model* const model = &loaded;
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  std::vector<TokenId> prompt = tokenizer->encode(o.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (prompt.empty()) fail("the prompt is empty and the model adds no BOS token");

  EngineConfig config;
  config.num_threads = o.threads > 0 ? o.threads : default_thread_count();
  config.max_model_len = o.ctx > 0 ? o.ctx : model->config().n_ctx_train;
  apply_kv_options(o.kv, config);
  // One sequence: the pool needs exactly the blocks of one full context (streaming: of the
  // window, plus the chunk in flight and the sinks' blocks).
  const int64_t bs = config.block_size;
  config.num_kv_blocks = o.kv.streaming() ? streaming_sequence_blocks(int(config.max_model_len), o.kv.sinks, int(bs),
                                                                     config.max_num_batched_tokens)
                                          : (config.max_model_len + bs - 1) / bs;
  config.max_num_seqs = 1;
  config.grammar_jump_forward = !o.no_jump_forward;
  std::unique_ptr<Model> draft;
  apply_spec_options(o.spec, *model, draft, config);
  check_kv_fits_memory(*model, config);
  config.parallel = &parallel;
  LLMEngine engine(*model, config, tokenizer->stop_token_ids());

  RequestSpec spec;
  spec.prompt = prompt;
  spec.max_tokens = o.n_predict;
  spec.ignore_eos = o.ignore_eos;
  spec.sampling = make_sampling_params(o.sampling);
  std::unique_ptr<grammar::GrammarCompiler> grammar_compiler;
  if (const auto constraint = make_constraint(o.grammar)) {
    grammar_compiler = std::make_unique<grammar::GrammarCompiler>(*tokenizer, model->config().n_vocab,
                                                                  tokenizer->stop_token_ids());
    spec.grammar = grammar_compiler->compile(*constraint);
  }
  const RequestId id = engine.add_request(spec);

  StreamingDetokenizer detokenizer(*tokenizer);
  detokenizer.prime(prompt.back());
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto first_token_time = start;
  auto last_token_time = start;
  std::vector<double> gaps;  // seconds between consecutive generated tokens
  int64_t generated = 0;
  bool stopped = false;
  // Installed only now: Ctrl-C while the model loads still ends the process at once.
  InterruptGuard interrupt_guard;
  while (engine.has_unfinished()) {
    // Polled between steps: a step is one forward pass, short next to a user's reaction.
    if (interrupted()) {
      engine.abort_request(id);
      stopped = true;
      break;
    }
    for (const RequestOutput& out : engine.step()) {
      for (const SampleResult& sample : out.new_tokens) {
        const auto now = Clock::now();
        if (generated++ == 0) {
          first_token_time = now;
        } else {
          gaps.push_back(std::chrono::duration<double>(now - last_token_time).count());
        }
        last_token_time = now;
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
  if (const Speculator* spec = engine.speculator()) {
    const SpecStats& st = spec->stats();
    std::fprintf(stderr, "speculative (%s): %lld drafts verified, %lld accepted (%.1f%%), %.2f tokens per verification\n",
                 spec->drafter().name(), (long long)st.num_draft_tokens, (long long)st.num_accepted_tokens,
                 st.num_draft_tokens > 0 ? 100.0 * double(st.num_accepted_tokens) / double(st.num_draft_tokens) : 0.0,
                 st.mean_acceptance_length());
  }
  if (o.timings && !gaps.empty()) {
    std::sort(gaps.begin(), gaps.end());
    auto at = [&](double q) { return 1e3 * gaps[std::min(gaps.size() - 1, size_t(q * double(gaps.size())))]; };
    std::fprintf(stderr, "inter-token time: median %.2f ms, p99 %.2f ms, max %.2f ms over %zu gaps\n", at(0.5),
                 at(0.99), 1e3 * gaps.back(), gaps.size());
  }
  if (stopped) {
    std::fprintf(stderr, "kestrel: interrupted after %lld tokens\n", (long long)generated);
    throw ExitStatus{kInterruptedExitStatus};
  }
}

void run(const RunOptions& o) {
  GroupMember member = join_group(o.parallel, o.model);
  if (!member.is_root()) return run_worker_rank(member, o.threads, o.kv);
  run_root_rank(member, [&] { generate(o, *member.model, *member.parallel); });
}

}  // namespace

void register_run(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
  cmd->add_option("model", options->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", options->prompt, "prompt text (special tokens such as <s> are parsed)");
  cmd->add_option("-n,--n-predict", options->n_predict, "tokens to generate")->check(int_range(1, 1 << 24));
  cmd->add_option("-t,--threads", options->threads, "threads (default: the available CPUs)")->check(int_range(1, 1024));
  cmd->add_option("-c,--ctx", options->ctx, "context length (default: the model's)")->check(int_range(2, 1 << 24));
  add_sampling_options(*cmd, options->sampling);
  add_kv_options(*cmd, options->kv);
  add_spec_options(*cmd, options->spec);
  add_grammar_options(*cmd, options->grammar);
  add_parallel_options(*cmd, options->parallel);
  cmd->add_flag("--no-jump-forward", options->no_jump_forward,
                "do not verify the tokens the grammar forces as drafts (one pass for several tokens)");
  cmd->add_flag("--ignore-eos", options->ignore_eos, "keep generating after end-of-text");
  cmd->add_flag("--timings", options->timings, "also print the median, p99 and max time between tokens");
  cmd->footer("Ctrl-C stops generating: the timing line still comes, and the exit status is 130.");
  cmd->callback([options] { run(*options); });
}

int default_thread_count() { return available_cpus(); }

}  // namespace kestrel::cli
