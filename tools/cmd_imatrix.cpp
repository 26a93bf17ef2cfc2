// kestrel imatrix MODEL -f TEXT -o FILE: the importance matrix of a model over a calibration text
// (llama-imatrix's method and file format; engine/imatrix.h), for `kestrel quantize --imatrix`
// or llama-quantize --imatrix.
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "cli_checks.h"
#include "commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "engine/compute_reencoding.h"
#include "engine/imatrix.h"
#include "perplexity_report.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct ImatrixOptions {
  std::string model, file, output = "imatrix.gguf";
  int64_t ctx = 512;
  int64_t batch = 2048;
  int64_t chunks = -1;
  int threads = 0;
  bool process_output = false;
  std::string compute_type;  // empty: the model's own weights
};

void imatrix(const ImatrixOptions& o) {
  const std::string text = read_input_file(o.file, "--file");
  const auto model = Model::load(o.model);
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<TokenId> tokens = tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  const int64_t available = require_chunks(o.file, tokens.size(), o.ctx, o.chunks, "--chunks", "--ctx");
  // After the text is checked: a short text fails before the re-encoding's seconds are spent.
  std::optional<ComputeReencoding> reencoding;
  if (!o.compute_type.empty()) {
    const DType type = kernel_type_named(o.compute_type, "--compute-type", "compute with");
    const auto t0 = std::chrono::steady_clock::now();
    ThreadPool pool(o.threads > 0 ? o.threads : default_thread_count());
    reencoding.emplace(*model, type, pool);
    fmt::print(stderr, "computing with the linear layers' matrices in {}: {} re-encoded in {:.1f} s, {} kept as they are\n",
               dtype_name(type), reencoding->reencoded(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), reencoding->kept());
  }
  PerplexityOptions options = chunked_options(*tokenizer, o.ctx, o.batch, o.chunks, o.threads);
  options.kv = model->kv_spec(DType::F16, DType::F16);
  const int64_t total = o.chunks > 0 ? o.chunks : available;
  fmt::print(stderr, "computing the importance matrix over {} chunks of {} tokens\n", total, o.ctx);
  ProgressBar progress("imatrix", total);
  std::string running;
  const ImatrixResult r = compute_imatrix(*model, tokens, options, o.process_output, o.file,
                                          [&](int64_t chunk, double ppl) {
                                            running += fmt::format("[{}]{:.4f},", chunk + 1, ppl);
                                            progress.update(chunk + 1);
                                          });
  progress.finish();
  fmt::print("{}\n", running);
  fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", r.perplexity.perplexity, r.perplexity.perplexity_error);
  save_imatrix(r.matrix, o.output);
  fmt::print("wrote {} ({} matrices, {} chunks x {} tokens) in {:.1f} s\n", o.output, r.matrix.entries.size(),
             r.matrix.chunk_count, r.matrix.chunk_size,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void register_imatrix(CLI::App& app) {
  auto options = std::make_shared<ImatrixOptions>();
  CLI::App* cmd = app.add_subcommand("imatrix", "importance matrix over a calibration text (llama.cpp's imatrix format)");
  cmd->add_option("model", options->model, "GGUF model (ideally the unquantized one)")->required();
  cmd->add_option("-f,--file", options->file, "calibration text")->required()->check(existing_file());
  cmd->add_option("-o,--output", options->output, "imatrix file to write (GGUF, default imatrix.gguf)");
  cmd->add_option("-c,--ctx", options->ctx, "tokens per chunk")->check(int_range(16, 1 << 20));
  cmd->add_option("-b,--batch", options->batch, "tokens per forward call")->check(int_range(16, 1 << 22));
  cmd->add_option("--chunks", options->chunks, "use this many chunks (default: all)")->check(int_range(1, 1 << 30));
  cmd->add_option("-t,--threads", options->threads, "threads (default: the available CPUs)")->check(int_range(1, 1024));
  cmd->add_flag("--process-output", options->process_output, "also collect the output head's input");
  cmd->add_option("--compute-type", options->compute_type,
                  "re-encode the layers' matrices and an untied head in this type in memory for the pass (W8A8: the fastest prompt "
                  "kernels); the activations, so the matrix, then differ slightly from the model's own");
  cmd->callback([options] { imatrix(*options); });
}

}  // namespace kestrel::cli
