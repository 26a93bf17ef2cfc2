// kestrel quantize IN OUT TYPE [--method rtn|imatrix|gptq|awq|smoothquant] [--calib TEXT] [--imatrix FILE]:
// re-encode a GGUF model's weights (convert/requantize.h), by round-to-nearest, minimising the
// importance-weighted error (an imatrix file, or one computed from --calib), or by GPTQ over
// --calib (engine/gptq_calibration.h) for Kestrel's INT4 per-group formats and Q4_K, or by AWQ
// over --calib (engine/awq_calibration.h) for any type, or by SmoothQuant's scales in the same pass
// (meant for W8A8). TYPE auto: a type per matrix under a size budget (quantize_auto.h).
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli_checks.h"
#include "calib/gptq.h"
#include "calib/grid_format.h"
#include "commands.h"
#include "convert/requantize.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/awq_calibration.h"
#include "engine/gptq_calibration.h"
#include "engine/imatrix.h"
#include "quant/format.h"
#include "perplexity_report.h"
#include "quantize_auto.h"
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
  int64_t calib_batch = 0;  // chunks through a layer at once (GPTQ, AWQ); 0: 4096 tokens' worth
  bool no_act_order = false;
  bool no_clip = false;
  bool mlp_error = false;
  bool pure = false;  // --pure: the recipe's base type for every matrix
  bool dry_run = false;
  bool leave_output = false;
  bool allow_requantize = false;
  std::vector<std::string> tensor_types;  // --tensor-type PATTERN=TYPE, in order
  std::string tensor_type_file;
  double damp = 0.0;  // 0: calib::default_gptq_damp
  double alpha = -1.0;  // smoothquant: migration strength; < 0: searched per input group
  std::string output_type, embedding_type;
  AutoQuantizeOptions automatic;  // type "auto"
};

// A type name given for one tensor (--tensor-type, --output-tensor-type, --token-embedding-type).
DType tensor_type(const std::string& name, const char* option) { return kernel_type_named(name, option, "write"); }

// The calibration text's tokens, checked to make `chunks` chunks of `ctx`.
std::vector<TokenId> calibration_tokens(const Tokenizer& tokenizer, const QuantizeOptions& o) {
  const std::string text = read_input_file(o.calib, "--calib");
  std::vector<TokenId> tokens = tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/false);
  require_chunks(o.calib, tokens.size(), o.calib_ctx, o.calib_chunks, "--calib-chunks", "--calib-ctx");
  return tokens;
}

// The calibration pass --calib-ctx and --calib-chunks ask for (GPTQ, AWQ).
CalibrationPass calibration_pass(const Tokenizer& tokenizer, const QuantizeOptions& o) {
  CalibrationPass pass;
  pass.n_ctx = o.calib_ctx;
  pass.n_chunks = o.calib_chunks;
  pass.bos_token = tokenizer.vocab().add_bos ? tokenizer.bos_id() : -1;
  pass.num_threads = o.threads > 0 ? o.threads : default_thread_count();
  pass.slice_chunks = o.calib_batch;
  return pass;
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
std::map<std::string, EncodedTensor> gptq_tensors(const std::string& input, const QuantizeOptions& o,
                                                  const QuantRecipe& recipe, ImportanceMatrix& imatrix) {
  // Not prefaulted: the calibration reads the model a layer at a time and drops each layer's pages.
  auto model = Model::load(input, {}, {.prefault = false});
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
    fail("--method gptq: no layer matrix of {} is to become a type GPTQ can target ({}); {} gives: {}", input,
         calib::kGptqTargets, recipe.name, other_types);
  }
  if (!other_types.empty()) {
    fmt::print(stderr, "gptq: the other matrices by their type's quantizer, with this pass's importance matrix "
               "where the type weighs error: {}\n", other_types);
  }
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const std::vector<TokenId> tokens = calibration_tokens(*tokenizer, o);
  GptqCalibrationOptions options;
  options.pass = calibration_pass(*tokenizer, o);
  options.gptq.act_order = !o.no_act_order;
  int64_t widest = 0;
  for (const auto& [name, type] : targets) widest = std::max(widest, model->file().find_tensor(name)->dims[0]);
  const int64_t calibrated_tokens = int64_t(o.calib_chunks) * o.calib_ctx;
  const double damp = o.damp > 0.0 ? o.damp : calib::default_gptq_damp(calibrated_tokens, widest);
  options.gptq.damp_percent = damp;
  fmt::print(stderr, "gptq: {} matrices over {} chunks of {} tokens of {} ({}, damp {}{})\n", targets.size(),
             o.calib_chunks, o.calib_ctx, o.calib, options.gptq.act_order ? "act-order, static groups" : "in order",
             damp, o.damp > 0.0 ? "" : fmt::format(": {} tokens for {} columns", calibrated_tokens, widest));
  const auto start = std::chrono::steady_clock::now();
  double loss = 0.0, loss_base = 0.0, hessian_seconds = 0.0, gptq_seconds = 0.0;
  ProgressBar progress("gptq", int64_t(targets.size()));
  int64_t done = 0, kept = 0;
  auto encoded = gptq_quantize_model(*model, tokens, targets, options, [&](const GptqTensorReport& r) {
    progress.clear();
    const double ratio = r.stats.proxy_loss_baseline > 0 ? r.stats.proxy_loss / r.stats.proxy_loss_baseline : 0.0;
    const char* baseline = quant::require_format(r.type).quantize_row_weighted != nullptr ? "imatrix" : "RTN";
    std::string stack;  // a MoE layer's experts or latent attention's heads, one by one
    if (r.stacked > 0 && r.name.find("_exps.") != std::string::npos) {
      stack = fmt::format("  {} experts, {} no calibration token chose (round to nearest)", r.stacked, r.unseen);
    } else if (r.stacked > 0) {
      stack = fmt::format("  {} heads", r.stacked);
    }
    fmt::print(stderr, "gptq: {:<28} {:>6} x {:<6} {}  output error vs {} {:.3f}{}{}{}{}  {:.1f} s\n", r.name, r.rows,
               r.cols, dtype_name(r.type), baseline, ratio,
               r.stats.kept_baseline ? fmt::format(" (kept {}'s)", baseline) : "", stack,
               r.stats.dead_columns > 0 ? fmt::format("  {} dead columns", r.stats.dead_columns) : "",
               r.stats.damp_used != damp ? fmt::format("  damp raised to {}", r.stats.damp_used) : "", r.seconds);
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

// AWQ's encodings of every layer matrix, with the norms and biases its scales changed; with
// for_gptq, scales only (no clipping) and the matrices in F32, for GPTQ to round.
// smooth: SmoothQuant's scales (--alpha, or its strength searched per group) instead of AWQ's
// search, no clipping.
std::map<std::string, EncodedTensor> awq_tensors(const QuantizeOptions& o, const QuantRecipe& recipe, bool for_gptq,
                                                 bool smooth = false) {
  // Not prefaulted: the calibration reads the model a layer at a time and drops each layer's pages.
  const auto model = Model::load(o.input, {}, {.prefault = false});
  std::map<std::string, DType> targets;
  const std::vector<QuantChoice> plan = requantize_plan(model->file(), recipe);
  for (int64_t il = 0; il < model->config().n_layer; ++il) {
    for (LinearKind k : kLayerLinearKinds) {
      targets[linear_tensor_name(il, k)] = DType::F32;  // the plan's type, below
    }
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto it = targets.find(model->file().tensors()[i].name);
    if (it != targets.end()) it->second = plan[i].type;
  }
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const std::vector<TokenId> tokens = calibration_tokens(*tokenizer, o);
  AwqCalibrationOptions options;
  options.pass = calibration_pass(*tokenizer, o);
  options.awq.clip = !o.no_clip && !for_gptq && !smooth;
  options.awq.mlp_output_error = o.mlp_error;
  const std::vector<double> alphas{0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9};
  if (smooth && o.alpha >= 0.0) options.awq.smooth_alpha = o.alpha;
  if (smooth && o.alpha < 0.0) options.awq.smooth_alphas = alphas, options.search_tokens = 1024;
  if (for_gptq) options.store_type = DType::F32;
  if (smooth) {
    fmt::print(stderr, "smoothquant: {} layers over {} chunks of {} tokens of {} ({})\n", model->config().n_layer,
               o.calib_chunks, o.calib_ctx, o.calib,
               o.alpha >= 0.0 ? fmt::format("alpha {}", o.alpha)
                              : fmt::format("alpha searched per input group among 0.3 ... 0.9 on {} tokens",
                                            options.search_tokens));
  } else {
  fmt::print(stderr, "awq: {} layers over {} chunks of {} tokens of {} (scales searched on {} tokens, {} ratios{})\n",
             model->config().n_layer, o.calib_chunks, o.calib_ctx, o.calib, options.search_tokens,
             options.awq.n_grid, options.awq.clip ? ", then clipping" : "");
  }
  const auto start = std::chrono::steady_clock::now();
  ProgressBar progress(smooth ? "smoothquant" : "awq", model->config().n_layer * 4);
  int64_t done = 0, scaled = 0;
  double loss = 0.0, loss_base = 0.0;
  auto encoded = awq_quantize_model(*model, tokens, targets, options, [&](const AwqGroupReport& r) {
    if (smooth && o.alpha >= 0.0) {
      progress.update(++done);
      return;
    }
    progress.clear();
    if (smooth) {
      fmt::print(stderr, "smoothquant: blk.{:<3} {:<12} {}  output error vs unsmoothed {:.3f}  {:.1f} s\n", r.layer,
                 r.group, r.grid >= 0 ? fmt::format("alpha {:.1f}", alphas[size_t(r.grid)]) : std::string("unscaled "),
                 r.loss_unscaled > 0 ? r.loss / r.loss_unscaled : 0.0, r.seconds);
      progress.update(++done);
      return;
    }
    const double ratio = r.loss_unscaled > 0 ? r.loss / r.loss_unscaled : 0.0;
    fmt::print(stderr, "awq: blk.{:<3} {:<12} {}  output error vs RTN {:.3f}{}  {:.1f} s\n", r.layer, r.group,
               r.grid >= 0 ? fmt::format("ratio {:.2f}", double(r.grid) / r.n_grid) : std::string("unscaled  "),
               ratio, r.clip.groups > 0 ? fmt::format(", clipped {} of {} groups (group error x{:.3f})", r.clip.clipped,
                                                      r.clip.groups, r.clip.loss_unclipped > 0 ? r.clip.loss / r.clip.loss_unclipped : 0.0)
                                        : std::string(), r.seconds);
    loss += r.loss, loss_base += r.loss_unscaled;
    scaled += r.grid >= 0;
    progress.update(++done);
  });
  progress.finish();
  if (smooth) {
    fmt::print(stderr, "smoothquant: {} input groups scaled in {:.1f} s\n", done,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return encoded;
  }
  fmt::print(stderr, "awq: {} input groups in {:.1f} s, {} scaled; summed output error before clipping {:.4g}, plain "
             "rounding's {:.4g} (ratio {:.3f})\n", done,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), scaled, loss, loss_base,
             loss_base > 0 ? loss / loss_base : 0.0);
  return encoded;
}

// `auto`: the importance matrix (given, or from --calib), then quantize_auto.
// --tensor-type PATTERN=TYPE (split at the first '='), and --tensor-type-file's entries (separated by
// spaces or newlines), in that order, as llama-quantize reads them.
std::vector<TensorTypeOverride> tensor_type_overrides(const QuantizeOptions& o) {
  std::vector<std::string> items = o.tensor_types;
  if (!o.tensor_type_file.empty()) {
    std::istringstream words(read_input_file(o.tensor_type_file, "--tensor-type-file"));
    for (std::string word; words >> word;) items.push_back(word);
  }
  std::vector<TensorTypeOverride> overrides;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail("--tensor-type {}: expected PATTERN=TYPE", item);
    if (eq == 0) fail("--tensor-type {}: missing tensor name", item);
    if (eq + 1 == item.size()) fail("--tensor-type {}: missing quantization type", item);
    const std::string pattern = item.substr(0, eq);
    check_tensor_type_pattern(pattern);
    overrides.push_back({pattern, tensor_type(item.substr(eq + 1), "--tensor-type")});
  }
  return overrides;
}

// --dry-run: each tensor's type and size, and the totals, as llama-quantize --dry-run prints them;
// nothing is written.
void print_plan(const std::string& input, const QuantRecipe& recipe) {
  const auto file = gguf::GgufFile::open(input);
  const std::vector<QuantChoice> plan = requantize_plan(*file, recipe);
  uint64_t bytes_in = 0, bytes_out = 0, elements = 0;
  std::string needs_imatrix;
  for (size_t i = 0; i < plan.size(); ++i) {
    const gguf::TensorInfo& t = file->tensors()[i];
    const uint64_t out = uint64_t(dtype_row_bytes(plan[i].type, t.dims[0]) * (t.num_elements / t.dims[0]));
    std::string dims;
    for (int64_t d : t.dims) dims += fmt::format("{}{}", dims.empty() ? "" : " x ", d);
    fmt::print("[{:4}/{:4}] {:<40} [{}] {} -> {}{}, {:.3f} MiB\n", i + 1, plan.size(), t.name, dims, dtype_name(t.type),
               dtype_name(plan[i].type), plan[i].fallback() ? fmt::format(" (fallback from {})", dtype_name(plan[i].wanted)) : "",
               double(out) / (1 << 20));
    bytes_in += t.num_bytes, bytes_out += out, elements += t.num_elements;
    if (needs_imatrix.empty() && !recipe.has_imatrix && plan[i].quantized && requires_imatrix(t.name, plan[i].type, recipe)) {
      needs_imatrix = t.name;
    }
  }
  fmt::print("model size = {:.2f} MiB ({:.2f} BPW)\nquant size = {:.2f} MiB ({:.2f} BPW)\n", double(bytes_in) / (1 << 20),
             8.0 * double(bytes_in) / double(elements), double(bytes_out) / (1 << 20), 8.0 * double(bytes_out) / double(elements));
  if (!needs_imatrix.empty()) {
    fmt::print("this quantization requires an importance matrix (--imatrix FILE or --calib TEXT): {} and others\n",
               needs_imatrix);
  }
}

// As llama-quantize: a tensor that is already quantized (Q4_K, IQ2_XXS, ...) is only re-encoded in
// another type with --allow-requantize (its rounding errors add to the new ones: quantize from
// F16/F32 where the original exists).
void refuse_requantizing(const std::string& input, const QuantRecipe& recipe) {
  const auto file = gguf::GgufFile::open(input);
  const std::vector<QuantChoice> plan = requantize_plan(*file, recipe);
  for (size_t i = 0; i < plan.size(); ++i) {
    const gguf::TensorInfo& t = file->tensors()[i];
    const bool quantized = t.type != DType::F32 && t.type != DType::F16 && t.type != DType::BF16 &&
                           quant::find_format(t.type) != nullptr;
    if (plan[i].type != t.type && quantized) {
      fail("{}: tensor '{}' is already quantized ({}); re-encoding it as {} adds a second rounding: quantize from "
           "the F16/F32 model, or pass --allow-requantize (as llama-quantize asks)",
           input, t.name, dtype_name(t.type), dtype_name(plan[i].type));
    }
  }
}

// llama-quantize refuses to write the lowest-bit types without an importance matrix; so does this,
// naming the first tensor that would need one.
void refuse_without_imatrix(const std::string& input, const QuantRecipe& recipe) {
  const auto file = gguf::GgufFile::open(input);
  const std::vector<QuantChoice> plan = requantize_plan(*file, recipe);
  for (size_t i = 0; i < plan.size(); ++i) {
    const std::string& name = file->tensors()[i].name;
    if (plan[i].quantized && requires_imatrix(name, plan[i].type, recipe)) {
      fail("{} needs an importance matrix (--imatrix FILE or --calib TEXT), as llama-quantize requires one for it: "
           "{} would be {}", recipe.name, name, dtype_name(plan[i].type));
    }
  }
}

void quantize_mixed(const QuantizeOptions& o) {
  if (o.pure || o.dry_run || !o.tensor_types.empty() || !o.tensor_type_file.empty() || o.leave_output) {
    fail("--pure, --dry-run, --tensor-type and --leave-output-tensor do not apply to auto, which chooses a type per matrix");
  }
  if (o.calib.empty()) fail("auto needs a calibration text (--calib TEXT): it measures each tensor's KL divergence on it");
  if (!o.allow_requantize) refuse_requantizing(o.input, pure_quant_recipe(DType::Q4_K));
  if (!o.method.empty() && o.method != "imatrix") fail("auto quantizes with importance weights; --method {} does not apply", o.method);
  if (!o.output_type.empty() || !o.embedding_type.empty()) {
    fail("auto chooses the output and embedding types itself; --output-tensor-type / --token-embedding-type do not apply");
  }
  AutoQuantizeOptions a = o.automatic;
  a.input = o.input, a.output = o.output, a.calib = o.calib, a.ctx = o.calib_ctx, a.threads = o.threads;
  check_auto_options(a);
  ImportanceMatrix imatrix;
  if (!o.imatrix.empty()) {
    imatrix = load_imatrix(o.imatrix);
  } else {
    imatrix = imatrix_from_calibration(o);
  }
  quantize_auto(a, imatrix);
}

void quantize(const QuantizeOptions& o) {
  if (o.type == "auto" || o.type == "AUTO") return quantize_mixed(o);
  if (o.automatic.target_bpw > 0 || o.automatic.target_size_gib > 0) fail("--target-bpw / --target-size are for type auto");
  auto recipe = find_quant_recipe(o.type);
  if (!recipe) fail("unknown quantization type '{}' (choose one of: {})", o.type, quant_recipe_names());
  if (!o.output_type.empty()) recipe->output_type = tensor_type(o.output_type, "--output-tensor-type");
  if (!o.embedding_type.empty()) recipe->embedding_type = tensor_type(o.embedding_type, "--token-embedding-type");
  if (o.pure) recipe->mix = QuantMix::Pure;
  const std::vector<TensorTypeOverride> overrides = tensor_type_overrides(o);
  recipe->overrides = &overrides;
  recipe->leave_output = o.leave_output;
  const std::string method = !o.method.empty() ? o.method : (!o.imatrix.empty() || !o.calib.empty()) ? "imatrix" : "rtn";
  // imatrix and GPTQ hand requantize_gguf an importance matrix (GPTQ's from its own pass); the
  // plans made before it (GPTQ's, AWQ's) must choose as it will.
  recipe->has_imatrix = method == "imatrix" || method == "gptq" || method == "awq-gptq";
  if (o.dry_run) return print_plan(o.input, *recipe);
  if (!o.allow_requantize) refuse_requantizing(o.input, *recipe);
  if (!recipe->has_imatrix) refuse_without_imatrix(o.input, *recipe);
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
  if ((method == "awq" || method == "awq-gptq" || method == "smoothquant") && (o.calib.empty() || !o.imatrix.empty())) {
    fail("--method {} needs a calibration text (--calib TEXT) and takes no --imatrix (it measures its own)", method);
  }
  if (o.no_clip && method != "awq") fail("--no-clip is an AWQ option (--method awq)");
  if (o.mlp_error && method != "awq" && method != "awq-gptq") fail("--awq-mlp-error is an AWQ option (--method awq)");
  if (o.alpha >= 0.0 && method != "smoothquant") fail("--alpha is a SmoothQuant option (--method smoothquant)");
  std::map<std::string, EncodedTensor> encoded;
  std::string input = o.input;
  // awq-gptq: the AWQ-scaled float model goes to a temporary file, which GPTQ then rounds.
  struct RemoveOnExit {
    std::string path;
    ~RemoveOnExit() {
      if (!path.empty()) std::remove(path.c_str());
    }
  } scaled_model;
  if (method == "awq") encoded = awq_tensors(o, *recipe, false);
  if (method == "smoothquant") encoded = awq_tensors(o, *recipe, false, true);
  if (method == "awq-gptq") {
    const auto scaled = awq_tensors(o, *recipe, true);
    scaled_model.path = input = o.output + ".awq-scaled.tmp";
    requantize_gguf(o.input, input, *find_quant_recipe("F32"), [](const RequantizeNote&) {}, o.threads, nullptr,
                    &scaled);
    fmt::print(stderr, "awq-gptq: the scaled model (F32) is in {}; GPTQ rounds it\n", input);
  }
  if (method == "gptq" || method == "awq-gptq") {
    imatrix.emplace();
    encoded = gptq_tensors(input, o, *recipe, *imatrix);
  }

  int fallbacks = 0, weighted = 0, calibrated = 0;
  std::map<DType, int> stored;                 // tensors per type written (the mixture, as llama-quantize lists it)
  std::map<DType, int> no_weighted_quantizer;  // unweighted because the type cannot weigh error
  std::string no_entry;                        // unweighted because the imatrix has no entry
  std::string derived;                         // tensors weighted by importance fit_imatrix derived, and how
  requantize_gguf(input, o.output, *recipe, [&](const RequantizeNote& note) {
    ++stored[note.to];
    if (note.fallback) {
      ++fallbacks;
      fmt::print(stderr, "{}: rows of this tensor do not divide into {} blocks; stored as {}\n",
                 note.tensor, dtype_name(note.wanted), dtype_name(note.to));
    }
    calibrated += !note.method.empty();
    if (!note.importance.empty()) derived += fmt::format("importance: {}: {}\n", note.tensor, note.importance);
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
  fmt::print(stderr, "{}", derived);
  if (method != "rtn" && method != "imatrix") {
    fmt::print(stderr, "{}: {} tensors written from {}\n", method, calibrated,
               method == "awq" ? "AWQ" : method == "smoothquant" ? "SmoothQuant" : "GPTQ");
  }
  std::string census;
  for (const auto& [type, count] : stored) census += fmt::format("{}{} {}", census.empty() ? "" : ", ", count, dtype_name(type));
  fmt::print(stderr, "wrote {} ({}{}, {}; {} tensors fell back to a higher-precision type): {}\n", o.output,
             recipe->name, o.pure ? " --pure" : "",
             method, fallbacks, census);
}

}  // namespace

void register_quantize(CLI::App& app) {
  auto options = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand("quantize", "re-encode a GGUF model's weights in another format");
  cmd->add_option("input", options->input, "input GGUF")->required();
  cmd->add_option("output", options->output, "output GGUF")->required();
  cmd->add_option("type", options->type,
                  "a llama-quantize file type, with its per-tensor mixture (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q2_K_S, "
                  "Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_XS, IQ3_S, "
                  "IQ3_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ1_S, IQ1_M, TQ1_0, TQ2_0, MXFP4_MOE; IQ3_XXS and the IQ2/IQ1 "
                  "types need --imatrix or --calib; --pure: the base type everywhere) or one type for every matrix "
                  "(F32, F16, BF16, Q2_K_PURE, Q3_K, Q4_K, Q5_K, MXFP4, INT8_PC, "
                  "INT4_SYM_G32/G64/G128, INT4_ASYM_G32/G64/G128, INT4_ZP_G32/G64/G128 (GPTQ's zero-point grid), "
                  "INT3_ASYM_G64/G128, INT2_ASYM_G64/G128, NF4, W8A8, "
                  "FP8_E4M3_PC) or auto (a type per matrix under --target-bpw/--target-size, from measured "
                  "sensitivities; needs --calib). Note: llama-quantize's Q3_K/Q4_K/Q5_K "
                  "mean Q3_K_M/Q4_K_M/Q5_K_M; here they are the one type for every matrix")
      ->required();
  cmd->add_flag("--pure", options->pure,
                "the type's base for every matrix, without llama.cpp's mixture rules (as llama-quantize --pure)");
  cmd->add_flag("--dry-run", options->dry_run, "print each tensor's type and the sizes; write nothing (as llama-quantize --dry-run)");
  cmd->add_option("--tensor-type", options->tensor_types,
                  "PATTERN=TYPE: tensors whose name contains a match of the regular expression take TYPE, the first "
                  "matching pattern winning (repeatable; as llama-quantize)");
  cmd->add_option("--tensor-type-file", options->tensor_type_file, "--tensor-type entries, separated by spaces or newlines")
      ->check(existing_file());
  cmd->add_flag("--leave-output-tensor", options->leave_output, "keep output.weight as it is (as llama-quantize)");
  cmd->add_flag("--allow-requantize", options->allow_requantize,
                "re-encode tensors that are already quantized (refused without it, as llama-quantize does)");
  cmd->add_option("-t,--threads", options->threads, "threads (default: the available CPUs)")
      ->check(int_range(1, 1024));
  cmd->add_option("--output-tensor-type", options->output_type, "type of output.weight (as llama-quantize)");
  cmd->add_option("--token-embedding-type", options->embedding_type, "type of token_embd.weight (as llama-quantize)");
  cmd->add_option("--method", options->method,
                  fmt::format("rtn (round to nearest), imatrix (importance-weighted error: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                              "Q5_0, IQ4_NL, IQ4_XS, NF4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M) or gptq "
                              "({}; needs --calib) or awq (activation-aware scales and clipping, any type, needs --calib) "
                              "or smoothquant (activation outliers moved into the weights, for W8A8; needs --calib); "
                              "default: imatrix with --imatrix or --calib, else rtn",
                              calib::kGptqTargets))
      ->check(CLI::IsMember({"rtn", "imatrix", "gptq", "awq", "awq-gptq", "smoothquant"}));
  cmd->add_option("--imatrix", options->imatrix,
                  "importance matrix (kestrel imatrix or llama-imatrix, GGUF or legacy .dat)")
      ->check(existing_file());
  cmd->add_option("--calib", options->calib, "calibration text (gptq; imatrix without --imatrix)")
      ->check(existing_file());
  cmd->add_option("--calib-ctx", options->calib_ctx, "tokens per calibration chunk (default 512)")
      ->check(int_range(16, int64_t(1) << 20));
  cmd->add_option("--calib-chunks", options->calib_chunks, "calibration chunks (default 128)")
      ->check(int_range(1, int64_t(1) << 20));
  cmd->add_option("--calib-batch", options->calib_batch,
                  "gptq, awq: calibration chunks run through a layer at once (default: 4096 tokens' worth); memory "
                  "grows with it, the result does not change")
      ->check(int_range(1, int64_t(1) << 20));
  cmd->add_flag("--no-act-order", options->no_act_order,
                "gptq: quantize columns in order (default: by decreasing activation, with static groups)");
  cmd->add_flag("--no-clip", options->no_clip, "awq: scales only, no clipping search");
  cmd->add_flag("--awq-mlp-error", options->mlp_error,
                "awq: choose gate/up's scales by the error at the MLP's output, as AutoAWQ (default: at their own outputs)");
  cmd->add_option("--alpha", options->alpha, "smoothquant: migration strength (default: searched per input group among 0.3 ... 0.9)")->check(number_range(0.0, 1.0));
  cmd->add_option("--damp", options->damp, "gptq: dampening, as a fraction of the Hessian's mean diagonal (default 0.01, or 0.1 "
                  "when the calibration has fewer than 4 tokens per column of the widest matrix)")
      ->check(number_range(1e-6, 10.0));
  cmd->add_option("--target-bpw", options->automatic.target_bpw, "auto: bits per weight over the quantized matrices")
      ->check(number_range(1.0, 32.0));
  cmd->add_option("--target-size", options->automatic.target_size_gib, "auto: the output file's size in GiB")
      ->check(number_range(1e-4, 1e6));
  cmd->add_option("--auto-types", options->automatic.types,
                  "auto: the types a matrix may take, comma separated (default Q3_K,Q4_K,Q5_K,Q6_K,Q8_0)");
  cmd->add_option("--auto-probe", options->automatic.probe,
                  "auto: the type each tensor's KL divergence is measured in (default Q3_K; one of --auto-types)");
  cmd->add_option("--auto-chunks", options->automatic.chunks,
                  "auto: calibration chunks (of --calib-ctx tokens) each tensor's KL divergence is measured on (default 4)")
      ->check(int_range(1, 1 << 20));
  cmd->callback([options] { quantize(*options); });
}

}  // namespace kestrel::cli
