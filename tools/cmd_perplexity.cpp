// kestrel perplexity MODEL -f TEXT [--ctx N]: llama-perplexity's method and output format.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct PerplexityCliOptions {
  std::string model;
  std::string file;
  int64_t ctx = 512;
  int64_t batch = 2048;
  int64_t chunks = -1;
  int threads = 0;
};

void perplexity(const PerplexityCliOptions& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) fail("{}: cannot read", o.file);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  const auto model = Model::load(o.model);
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<TokenId> tokens = tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  fmt::print(stderr, "tokenized {} bytes into {} tokens in {:.2f} s\n", text.size(), tokens.size(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (int64_t(tokens.size()) < 2 * o.ctx) {
    fail("{}: {} tokens is fewer than 2 x ctx ({}); use a longer text or a smaller --ctx", o.file,
         tokens.size(), 2 * o.ctx);
  }

  PerplexityOptions options;
  options.n_ctx = o.ctx;
  options.n_batch = std::max(o.batch, o.ctx);
  options.max_chunks = o.chunks;
  options.num_threads = o.threads > 0 ? o.threads : default_thread_count();
  options.bos_token = tokenizer->vocab().add_bos ? tokenizer->bos_id() : -1;
  const int64_t total_chunks = o.chunks >= 0 ? std::min<int64_t>(o.chunks, int64_t(tokens.size()) / o.ctx)
                                             : int64_t(tokens.size()) / o.ctx;
  fmt::print(stderr, "calculating perplexity over {} chunks, n_ctx={}, batch={}\n", total_chunks,
             o.ctx, options.n_batch);
  ProgressBar progress("perplexity", total_chunks);
  std::string running;
  const PerplexityResult r = compute_perplexity(*model, tokens, options, [&](int64_t chunk, double ppl) {
    running += fmt::format("[{}]{:.4f},", chunk + 1, ppl);
    progress.update(chunk + 1);
  });
  progress.finish();
  fmt::print("{}\n", running);
  fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", r.perplexity, r.perplexity_error);
  fmt::print(stderr, "{} chunks, {} scored tokens, mean NLL {:.4f} nats/token, {:.1f} s\n",
             r.num_chunks, r.num_scored_tokens, r.mean_nll,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto options = std::make_shared<PerplexityCliOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "perplexity of a model over a text file");
  cmd->add_option("model", options->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", options->file, "text file")->required();
  cmd->add_option("-c,--ctx", options->ctx, "tokens per chunk")->check(CLI::Range(4, 1 << 20));
  cmd->add_option("-b,--batch", options->batch, "tokens per forward call")->check(CLI::Range(4, 1 << 22));
  cmd->add_option("--chunks", options->chunks, "score at most this many chunks (default: all)");
  cmd->add_option("-t,--threads", options->threads, "threads (default: all cores)")->check(CLI::Range(1, 1024));
  cmd->callback([options] { perplexity(*options); });
}

}  // namespace kestrel::cli
