// kestrel quantize IN OUT TYPE [--method rtn|imatrix|gptq] [--calib TEXT] [--imatrix FILE]:
// re-encode a GGUF model's weights (convert/requantize.h), by round-to-nearest, minimising the
// importance-weighted error (an imatrix file, or one computed from --calib), or by GPTQ over
// --calib (engine/gptq_calibration.h) for Kestrel's INT4 per-group formats.
#include <chrono>
#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "calib/gptq.h"
#include "commands.h"
#include "convert/requantize.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/gptq_calibration.h"
#include "engine/imatrix.h"
#include "quant/format.h"
#include "perplexity_report.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct QuantizeOptions {
  std::string input;
  std::string output;
  std::string type;
  int threads = 0;
  std::string method;  // empty: imatrix with --imatrix/--calib, else rtn
  std::string imatrix;
  std::string calib;
  int64_t calib_ctx = 512;
  int64_t calib_chunks = 128;
  bool no_act_order = false;
  double damp = 0.01;
  std::string output_type, embedding_type;
};

// A type name given for one tensor (--output-tensor-type, --token-embedding-type).
DType tensor_type(const std::string& name, const char* option) {
  const auto type = dtype_from_name(name);
  if (!type || quant::find_format(*type) == nullptr) fail("{} {}: not a type Kestrel can write", option, name);
  return *type;
}

// The calibration text's tokens, checked to make `chunks` chunks of `ctx`.
std::vector<TokenId> calibration_tokens(const Tokenizer& tokenizer, const QuantizeOptions& o) {
  const std::string text = read_text_file(o.calib);
  std::vector<TokenId> tokens = tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/false);
  require_chunks(o.calib, tokens.size(), o.calib_ctx, o.calib_chunks, "--calib-chunks", "--calib-ctx");
  return tokens;
}

ImportanceMatrix imatrix_from_calibration(const QuantizeOptions& o) {
  const auto model = Model::load(o.input);
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const std::vector<TokenId> tokens = calibration_tokens(*tokenizer, o);
  PerplexityOptions options = chunked_options(*tokenizer, o.calib_ctx, 2048, o.calib_chunks, o.threads);
  options.kv = model->kv_spec(DType::F16, DType::F16);
  fmt::print(stderr, "computing the importance matrix over {} chunks of {} tokens of {}\n", o.calib_chunks,
             o.calib_ctx, o.calib);
  ProgressBar progress("imatrix", o.calib_chunks);
  ImatrixResult r = compute_imatrix(*model, tokens, options, false, o.calib,
                                    [&](int64_t chunk, double) { progress.update(chunk + 1); });
  progress.finish();
  return std::move(r.matrix);
}

// GPTQ's encodings, and in `imatrix` the importance matrix of the same pass (for the others).
std::map<std::string, EncodedTensor> gptq_tensors(const QuantizeOptions& o, const QuantRecipe& recipe,
                                                  ImportanceMatrix& imatrix) {
  auto model = Model::load(o.input);
  std::map<std::string, DType> targets;
  const std::vector<QuantChoice> plan = requantize_plan(model->file(), recipe);
  std::map<DType, int> others;  // quantized, but not by GPTQ: how many of each type
  for (size_t i = 0; i < plan.size(); ++i) {
    const std::string& name = model->file().tensors()[i].name;
    if (!plan[i].quantized) continue;
    if (calib::gptq_supports(plan[i].type) && name.starts_with("blk.")) {
      targets[name] = plan[i].type;
    } else if (plan[i].type != model->file().tensors()[i].type) {
      ++others[plan[i].type];
    }
  }
  std::string other_types;
  for (const auto& [type, count] : others) {
    other_types += fmt::format("{}{} x {}", other_types.empty() ? "" : ", ", count, dtype_name(type));
  }
  if (targets.empty()) {
    fail("--method gptq: no layer matrix of {} is to become a type GPTQ can target (Q4_K, INT4_SYM_G32/G64/G128, "
         "INT4_ASYM_G32/G64/G128); {} gives: {}", o.input, recipe.name, other_types);
  }
  if (!other_types.empty()) {
    fmt::print(stderr, "gptq: the other matrices by their type's quantizer, with this pass's importance matrix "
               "where the type weighs error: {}\n", other_types);
  }
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const std::vector<TokenId> tokens = calibration_tokens(*tokenizer, o);
  GptqCalibrationOptions options;
  options.n_ctx = o.calib_ctx;
  options.n_chunks = o.calib_chunks;
  options.bos_token = tokenizer->vocab().add_bos ? tokenizer->bos_id() : -1;
  options.num_threads = o.threads > 0 ? o.threads : default_thread_count();
  options.gptq.act_order = !o.no_act_order;
  options.gptq.damp_percent = o.damp;
  fmt::print(stderr, "gptq: {} matrices over {} chunks of {} tokens of {} ({}, damp {})\n", targets.size(),
             o.calib_chunks, o.calib_ctx, o.calib, options.gptq.act_order ? "act-order, static groups" : "in order",
             o.damp);
  const auto start = std::chrono::steady_clock::now();
  double loss = 0.0, loss_base = 0.0, hessian_seconds = 0.0, gptq_seconds = 0.0;
  ProgressBar progress("gptq", int64_t(targets.size()));
  int64_t done = 0, kept = 0;
  auto encoded = gptq_quantize_model(*model, tokens, targets, options, [&](const GptqTensorReport& r) {
    progress.clear();
    const double ratio = r.stats.proxy_loss_baseline > 0 ? r.stats.proxy_loss / r.stats.proxy_loss_baseline : 0.0;
    const char* baseline = quant::require_format(r.type).quantize_row_weighted != nullptr ? "imatrix" : "RTN";
    fmt::print(stderr, "gptq: {:<28} {:>6} x {:<6} {}  output error vs {} {:.3f}{}{}{}  {:.1f} s\n", r.name, r.rows,
               r.cols, dtype_name(r.type), baseline, ratio,
               r.stats.kept_baseline ? fmt::format(" (kept {}'s)", baseline) : "",
               r.stats.dead_columns > 0 ? fmt::format("  {} dead columns", r.stats.dead_columns) : "",
               r.stats.damp_used != o.damp ? fmt::format("  damp raised to {}", r.stats.damp_used) : "", r.seconds);
    hessian_seconds += r.hessian_seconds;
    gptq_seconds += r.seconds;
    loss += r.stats.kept_baseline ? r.stats.proxy_loss_baseline : r.stats.proxy_loss;
    loss_base += r.stats.proxy_loss_baseline;
    kept += r.stats.kept_baseline;
    progress.update(++done);
  }, &imatrix);
  progress.finish();
  if (encoded.size() != targets.size()) {
    fail("internal: GPTQ reached {} of {} matrices", encoded.size(), targets.size());
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr, "gptq: {} matrices in {:.1f} s (Hessians {:.1f} s, GPTQ {:.1f} s, forward pass {:.1f} s); summed "
             "output error {:.4g}, the types' own quantizers' {:.4g} (ratio {:.3f}); {} kept their quantizer's "
             "encoding (lower error)\n", encoded.size(), total, hessian_seconds, gptq_seconds,
             total - hessian_seconds - gptq_seconds, loss, loss_base, loss_base > 0 ? loss / loss_base : 0.0, kept);
  return encoded;
}

void quantize(const QuantizeOptions& o) {
  auto recipe = find_quant_recipe(o.type);
  if (!recipe) fail("unknown quantization type '{}' (choose one of: {})", o.type, quant_recipe_names());
  if (!o.output_type.empty()) recipe->output_type = tensor_type(o.output_type, "--output-tensor-type");
  if (!o.embedding_type.empty()) recipe->embedding_type = tensor_type(o.embedding_type, "--token-embedding-type");
  const std::string method = !o.method.empty() ? o.method : (!o.imatrix.empty() || !o.calib.empty()) ? "imatrix" : "rtn";
  if (method == "rtn" && (!o.imatrix.empty() || !o.calib.empty())) {
    fail("--method rtn takes neither --imatrix nor --calib");
  }
  if (method == "imatrix" && o.imatrix.empty() == o.calib.empty()) {
    fail("--method imatrix needs an importance matrix: --imatrix FILE or --calib TEXT (one of them)");
  }
  if (method == "gptq" && (o.calib.empty() || !o.imatrix.empty())) {
    fail("--method gptq needs a calibration text (--calib TEXT) and takes no --imatrix");
  }
  std::optional<ImportanceMatrix> imatrix;
  if (!o.imatrix.empty()) {
    imatrix = load_imatrix(o.imatrix);
    fmt::print(stderr, "imatrix {}: {} matrices, {} chunks of {} tokens\n", o.imatrix, imatrix->entries.size(),
               imatrix->chunk_count, imatrix->chunk_size);
  } else if (method == "imatrix") {
    imatrix = imatrix_from_calibration(o);
  }
  std::map<std::string, EncodedTensor> encoded;
  if (method == "gptq") {
    imatrix.emplace();
    encoded = gptq_tensors(o, *recipe, *imatrix);
  }

  int fallbacks = 0, weighted = 0, calibrated = 0;
  std::map<DType, int> no_weighted_quantizer;  // unweighted because the type cannot weigh error
  std::string no_entry;                        // unweighted because the imatrix has no entry
  requantize_gguf(o.input, o.output, *recipe, [&](const RequantizeNote& note) {
    if (note.fallback) {
      ++fallbacks;
      fmt::print(stderr, "{}: rows of this tensor do not divide into {} blocks; stored as {}\n",
                 note.tensor, dtype_name(note.wanted), dtype_name(note.to));
    }
    calibrated += !note.method.empty();
    if (imatrix && note.method.empty() && note.from != note.to && note.to != DType::F32) {
      if (note.weighted) {
        ++weighted;
      } else if (quant::require_format(note.to).quantize_row_weighted == nullptr) {
        ++no_weighted_quantizer[note.to];
      } else {
        no_entry += fmt::format("{}{} ({})", no_entry.empty() ? "" : ", ", note.tensor, dtype_name(note.to));
      }
    }
  }, o.threads, imatrix ? &*imatrix : nullptr, encoded.empty() ? nullptr : &encoded);
  if (imatrix) {
    std::string types;
    for (const auto& [type, count] : no_weighted_quantizer) {
      types += fmt::format("{}{} x {}", types.empty() ? "" : ", ", count, dtype_name(type));
    }
    fmt::print(stderr, "imatrix: {} tensors quantized with importance weights{}{}{}{}\n", weighted,
               types.empty() ? "" : "; without (their type has no weighted quantizer): ", types,
               no_entry.empty() ? "" : "; without (no imatrix entry): ", no_entry);
  }
  if (method == "gptq") fmt::print(stderr, "gptq: {} tensors written from GPTQ\n", calibrated);
  fmt::print(stderr, "wrote {} ({}, {}; {} tensors fell back to a higher-precision type)\n", o.output,
             recipe->name, method, fallbacks);
}

}  // namespace

void register_quantize(CLI::App& app) {
  auto options = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand("quantize", "re-encode a GGUF model's weights in another format");
  cmd->add_option("input", options->input, "input GGUF")->required();
  cmd->add_option("output", options->output, "output GGUF")->required();
  cmd->add_option("type", options->type,
                  "one type for every matrix (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, INT8_PC, "
                  "INT4_SYM_G32/G64/G128, INT4_ASYM_G32/G64/G128, FP8_E4M3_PC) or a llama.cpp "
                  "mixture (Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M). Note: llama-quantize's Q4_K means "
                  "Q4_K_M; here Q4_K is Q4_K for every matrix")
      ->required();
  cmd->add_option("-t,--threads", options->threads, "threads (default: one per hardware thread)");
  cmd->add_option("--output-tensor-type", options->output_type, "type of output.weight (as llama-quantize)");
  cmd->add_option("--token-embedding-type", options->embedding_type, "type of token_embd.weight (as llama-quantize)");
  cmd->add_option("--method", options->method,
                  "rtn (round to nearest), imatrix (importance-weighted error: Q4_K, Q5_K, Q6_K, Q5_0) or gptq "
                  "(Q4_K, INT4_SYM_G*/INT4_ASYM_G*, needs --calib); default: imatrix with --imatrix or --calib, "
                  "else rtn")
      ->check(CLI::IsMember({"rtn", "imatrix", "gptq"}));
  cmd->add_option("--imatrix", options->imatrix,
                  "importance matrix (kestrel imatrix or llama-imatrix, GGUF or legacy .dat)");
  cmd->add_option("--calib", options->calib, "calibration text (gptq; imatrix without --imatrix)");
  cmd->add_option("--calib-ctx", options->calib_ctx, "tokens per calibration chunk (default 512)")
      ->check(CLI::Range(int64_t(16), int64_t(1) << 20));
  cmd->add_option("--calib-chunks", options->calib_chunks, "calibration chunks (default 128)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_flag("--no-act-order", options->no_act_order,
                "gptq: quantize columns in order (default: by decreasing activation, with static groups)");
  cmd->add_option("--damp", options->damp, "gptq: dampening, as a fraction of the Hessian's mean diagonal (default 0.01)")
      ->check(CLI::Range(1e-6, 10.0));
  cmd->callback([options] { quantize(*options); });
}

}  // namespace kestrel::cli
