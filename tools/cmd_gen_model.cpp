// kestrel gen-model --preset P --type T -o FILE: a synthetic model (a real model's shape and
// vocabulary, random weights) for measuring speed without a download.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "cli_checks.h"
#include "commands.h"
#include "convert/gen_model.h"
#include "core/error.h"
#include "core/progress.h"

namespace kestrel::cli {
namespace {

struct GenModelCliOptions {
  std::string preset;
  std::string type = "F16";
  bool pure = false;
  std::string output;
  uint64_t seed = 0;
  int threads = 0;
  std::string vocab;                           // overrides the preset's vocabulary file
  std::string models_dir;  // where the vocabularies are found; empty: default_models_dir()
  bool list = false;
};

// ../shared/models seen from the current directory (the repository root) or, failing that, from
// the repository that holds this executable (build/<dir>/tools/kestrel).
std::string default_models_dir() {
  namespace fs = std::filesystem;
  const fs::path relative = fs::path("..") / "shared" / "models";
  if (fs::is_directory(relative)) return relative.string();
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    const fs::path beside_repo = exe.parent_path().parent_path().parent_path().parent_path() / relative;
    if (fs::is_directory(beside_repo)) return beside_repo.string();
  }
  return relative.string();
}

void list_presets() {
  fmt::print("{:<16} {:>8} {:>6} {:>6} {:>5} {:>4} {:>6} {:>7} {:>5}  {}\n", "preset", "params",
             "hidden", "layers", "heads", "kv", "ffn", "vocab", "tied", "shape of");
  for (const ModelPreset& p : model_presets()) {
    fmt::print("{:<16} {:>7.2f}B {:>6} {:>6} {:>5} {:>4} {:>6} {:>7} {:>5}  {}\n", p.name,
               double(p.parameter_count()) / 1e9, p.n_embd, p.n_layer, p.n_head, p.n_head_kv,
               p.n_ff, p.n_vocab, p.tied_embeddings ? "yes" : "no", p.description);
  }
}

void gen_model(const GenModelCliOptions& o) {
  if (o.list) {
    list_presets();
    return;
  }
  if (o.preset.empty() || o.output.empty()) fail("gen-model needs --preset and -o (or --list)");
  const ModelPreset* preset = find_model_preset(o.preset);
  if (preset == nullptr) {
    list_presets();
    fail("unknown preset '{}'", o.preset);
  }
  const std::optional<QuantRecipe> recipe = find_quant_recipe(o.type);
  if (!recipe) fail("unknown type '{}' (choose one of: {})", o.type, quant_recipe_names());

  GenModelOptions options;
  options.preset = o.preset;
  options.type = o.type;
  options.pure = o.pure;
  options.output = o.output;
  options.seed = o.seed;
  options.num_threads = o.threads > 0 ? o.threads : default_thread_count();
  const std::string models_dir = o.models_dir.empty() ? default_models_dir() : o.models_dir;
  options.llama3_tiktoken = o.vocab.empty() ? models_dir + "/llama3/tokenizer.model" : o.vocab;
  options.spm_vocab_gguf =
      o.vocab.empty() ? models_dir + "/llama.cpp-vocab/ggml-vocab-llama-spm.gguf" : o.vocab;
  options.gpt2_vocab_gguf = o.vocab.empty() ? models_dir + "/llama.cpp-vocab/ggml-vocab-gpt-2.gguf" : o.vocab;

  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<ProgressBar> progress;
  const GenModelStats stats = generate_model(options, [&](int64_t done, int64_t total) {
    if (!progress) progress = std::make_unique<ProgressBar>("generating", total);
    progress->update(done);
  });
  if (progress) progress->finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr, "wrote {}: {} ({}), {:.3f}B parameters, {} tensors, {:.2f} GiB, {:.1f} s\n",
             o.output, preset->description, recipe->name, double(stats.parameters) / 1e9,
             stats.tensors, double(stats.tensor_bytes) / double(1 << 30), seconds);
}

}  // namespace

void register_gen_model(CLI::App& app) {
  auto options = std::make_shared<GenModelCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "gen-model", "write a synthetic model: a real model's shape and vocabulary, random weights");
  cmd->add_option("--preset", options->preset, "model shape (--list shows them)");
  cmd->add_option("--type", options->type, "weight type or mixture, as for `kestrel quantize` (default F16): " + quant_recipe_names());
  cmd->add_flag("--pure", options->pure, "the type's base for every matrix, without llama.cpp's mixture rules");
  cmd->add_option("-o,--output", options->output, "output GGUF file");
  cmd->add_option("--seed", options->seed, "RNG seed (default 0); the file does not depend on -t")
      ->check(int_range(0, INT64_MAX));
  cmd->add_option("-t,--threads", options->threads, "threads (default: the available CPUs)")->check(int_range(1, 1024));
  cmd->add_option("--vocab", options->vocab,
                  "vocabulary file: Meta's Llama 3 tokenizer.model, or a GGUF with the preset's vocabulary "
                  "(Llama 2's, or GPT-2's for the MoE presets)")
      ->check(existing_file());
  cmd->add_option("--models-dir", options->models_dir,
                  "directory holding llama3/tokenizer.model and llama.cpp-vocab/ (default: ../shared/models "
                  "from the current directory, else beside the repository holding this binary)")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--list", options->list, "list the presets");
  cmd->callback([options] { gen_model(*options); });
}

}  // namespace kestrel::cli
