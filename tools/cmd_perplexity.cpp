// kestrel perplexity MODEL -f TEXT [--ctx N]: llama-perplexity's method and output format.
//   --kv-type T [--kld-kv-type B]   K/V in type T; with B, also the KL divergence of T's
//                                   next-token distributions from B's (same run, same chunks)
//   --attention-sinks N             stream the text as one sequence through a rolling window of
//                                   --ctx tokens with N sinks (0: the window alone), scoring every
//                                   token from position --ctx on
#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/perplexity.h"
#include "kv_options.h"
#include "parallel_options.h"
#include "perplexity_report.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct PerplexityCliOptions {
  std::string model;
  std::string file;
  int64_t ctx = 512;
  int64_t batch = 2048;
  int64_t chunks = -1;
  int64_t max_tokens = -1;
  int threads = 0;
  KvOptions kv;
  std::string kld_kv_type;
  bool json = false;
  ParallelOptions parallel;
};

void score(const PerplexityCliOptions& o, const std::string& text, const Model& model, ParallelContext& parallel);

void perplexity(const PerplexityCliOptions& o) {
  // The options' conflicts before the text is read and the model loaded (the engine's own check
  // would name no option).
  if (o.kv.streaming() && o.kv.sinks >= o.ctx) {
    fail("--attention-sinks {} must be fewer than the window (--ctx {}): the window holds the sinks and the "
         "recent tokens", o.kv.sinks, o.ctx);
  }
  if (o.kv.streaming() && !o.kld_kv_type.empty()) {
    fail("--kld-kv-type is for chunked perplexity, not with --attention-sinks");
  }
  if (!o.kld_kv_type.empty() && (o.parallel.config.tp > 1 || o.parallel.config.pp > 1)) {
    fail("--kld-kv-type runs the model twice in one process: not with --tp/--pp");
  }
  const std::string text = read_input_file(o.file, "--file");

  GroupMember member = join_group(o.parallel, o.model);
  if (!member.is_root()) return run_worker_rank(member, o.threads, o.kv);
  run_root_rank(member, [&] { score(o, text, *member.model, *member.parallel); });
}

void score(const PerplexityCliOptions& o, const std::string& text, const Model& model, ParallelContext& parallel) {
  const auto tokenizer = Tokenizer::from_gguf(model.file());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<TokenId> tokens = tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  fmt::print(stderr, "tokenized {} bytes into {} tokens in {:.2f} s\n", text.size(), tokens.size(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

  PerplexityOptions options = chunked_options(*tokenizer, o.ctx, o.batch, o.chunks, o.threads);
  options.max_tokens = o.max_tokens;
  if (parallel.distributed()) options.parallel = &parallel;
  options.kv = model.kv_spec(o.kv.k_type(), o.kv.v_type());
  options.kv.rotate = o.kv.rotate;
  validate_kv_spec(options.kv);
  if (!o.kld_kv_type.empty()) {
    const DType base = parse_kv_type(o.kld_kv_type);
    options.base_kv = model.kv_spec(base, base);
    validate_kv_spec(*options.base_kv);
  }

  PerplexityResult r;
  if (o.kv.streaming()) {
    options.sink_tokens = o.kv.sinks;
    options.n_batch = std::min<int64_t>(o.batch, 512);
    const int64_t total = o.max_tokens > 0 ? std::min<int64_t>(o.max_tokens, int64_t(tokens.size()))
                                           : int64_t(tokens.size());
    fmt::print(stderr, "streaming {} tokens through a rolling window of {} with {} attention sinks, KV {}\n",
               total, o.ctx, o.kv.sinks, options.kv.describe());
    ProgressBar progress("perplexity", total);
    r = compute_streaming_perplexity(model, tokens, options,
                                     [&](int64_t done, double) { progress.update(done); });
    progress.finish();
    fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f} (streamed, {} tokens scored)\n", r.perplexity,
               r.perplexity_error, r.num_scored_tokens);
  } else {
    if (int64_t(tokens.size()) < 2 * o.ctx) {
      fail("{}: {} tokens is fewer than 2 x ctx ({}); use a longer text or a smaller --ctx", o.file,
           tokens.size(), 2 * o.ctx);
    }
    const int64_t total_chunks = o.chunks >= 0 ? std::min<int64_t>(o.chunks, int64_t(tokens.size()) / o.ctx)
                                               : int64_t(tokens.size()) / o.ctx;
    fmt::print(stderr, "calculating perplexity over {} chunks, n_ctx={}, batch={}, KV {}{}\n", total_chunks,
               o.ctx, options.n_batch, options.kv.describe(),
               options.base_kv ? ", KL divergence from KV " + options.base_kv->describe() : "");
    ProgressBar progress("perplexity", total_chunks);
    std::string running;
    r = compute_perplexity(model, tokens, options, [&](int64_t chunk, double ppl) {
      running += fmt::format("[{}]{:.4f},", chunk + 1, ppl);
      progress.update(chunk + 1);
    });
    progress.finish();
    fmt::print("{}\n", running);
    fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", r.perplexity, r.perplexity_error);
    if (r.kld) print_kld(r, "base KV");
  }
  fmt::print(stderr, "{} chunks, {} scored tokens, mean NLL {:.4f} nats/token, {:.1f} s\n",
             r.num_chunks, r.num_scored_tokens, r.mean_nll,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (o.json) {
    nlohmann::json j = {{"ppl", r.perplexity}, {"ppl_error", r.perplexity_error},
                        {"scored_tokens", r.num_scored_tokens}, {"kv", options.kv.describe()},
                        {"ctx", o.ctx}};
    if (o.kv.streaming()) j["attention_sinks"] = o.kv.sinks;
    if (r.kld) add_kld_json(j, r);
    fmt::print("{}\n", j.dump());
  }
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto options = std::make_shared<PerplexityCliOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "perplexity of a model over a text file");
  cmd->add_option("model", options->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", options->file, "text file")->required()->check(existing_file());
  cmd->add_option("-c,--ctx", options->ctx, "tokens per chunk (the window when streaming)")->check(int_range(4, 1 << 20));
  cmd->add_option("-b,--batch", options->batch, "tokens per forward call")->check(int_range(4, 1 << 22));
  cmd->add_option("--chunks", options->chunks, "score at most this many chunks (default: all)")
      ->check(int_range(1, 1 << 30));
  cmd->add_option("--max-tokens", options->max_tokens, "streaming: stream at most this many tokens of the text")
      ->check(int_range(1, int64_t(1) << 40));
  cmd->add_option("-t,--threads", options->threads, "threads (default: the available CPUs)")->check(int_range(1, 1024));
  add_kv_options(*cmd, options->kv);
  cmd->add_option("--kld-kv-type", options->kld_kv_type,
                  "also run the chunks with this KV type (e.g. f32) and print the KL divergence from it");
  cmd->add_flag("--json", options->json, "end with one JSON line of the figures");
  add_parallel_options(*cmd, options->parallel);
  cmd->callback([options] { perplexity(*options); });
}

}  // namespace kestrel::cli
