#include "quantize_auto.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "calib/mixed_precision.h"
#include "cli_checks.h"
#include "commands.h"
#include "convert/requantize.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/tensor_sensitivity.h"
#include "perplexity_report.h"
#include "quant/format.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

std::vector<DType> parse_types(const std::string& list) {
  std::vector<DType> types;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    const auto type = dtype_from_name(name);
    if (!type || quant::find_format(*type) == nullptr) fail("--auto-types: '{}' is not a type Kestrel can write", name);
    if (std::find(types.begin(), types.end(), *type) == types.end()) types.push_back(*type);
  }
  if (types.empty()) fail("--auto-types: no type given");
  return types;
}

double mib(int64_t bytes) { return double(bytes) / (1 << 20); }

}  // namespace

AutoTypes check_auto_options(const AutoQuantizeOptions& o) {
  if ((o.target_bpw > 0) == (o.target_size_gib > 0)) fail("auto needs one budget: --target-bpw B or --target-size GIB");
  std::vector<DType> candidates = parse_types(o.types);
  const auto probe = dtype_from_name(o.probe);
  if (!probe || std::find(candidates.begin(), candidates.end(), *probe) == candidates.end()) {
    fail("--auto-probe {}: must be one of the candidate types ({})", o.probe, o.types);
  }
  return {std::move(candidates), *probe};
}

void quantize_auto(const AutoQuantizeOptions& o, const ImportanceMatrix& imatrix_as_read) {
  const AutoTypes types = check_auto_options(o);
  const auto start = std::chrono::steady_clock::now();
  auto model = Model::load(o.input);
  const ImportanceMatrix imatrix = fit_imatrix(imatrix_as_read, model->file(), "imatrix");
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const std::string text = read_input_file(o.calib, "--calib");
  const std::vector<TokenId> tokens = tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  require_chunks(o.calib, tokens.size(), o.ctx, o.chunks, "--auto-chunks", "--calib-ctx");

  SensitivityOptions options;
  options.candidates = types.candidates;
  options.probe = types.probe;
  options.perplexity = chunked_options(*tokenizer, o.ctx, 2048, o.chunks, o.threads);
  options.perplexity.kv = model->kv_spec(DType::F16, DType::F16);
  options.num_threads = o.threads > 0 ? o.threads : default_thread_count();
  const std::vector<QuantChoice> all = requantize_plan(model->file(), pure_quant_recipe(DType::Q4_K));
  const int64_t n_matrices = int64_t(sensitivity_tensors(*model).size());
  fmt::print(stderr, "auto: measuring {} matrices: each alone in {} over {} chunks of {} tokens of {}; candidates {}\n",
             n_matrices, o.probe, o.chunks, o.ctx, o.calib, o.types);
  ProgressBar progress("sensitivity", n_matrices);
  int64_t done = 0;
  const std::vector<TensorSensitivity> measured =
      measure_tensor_sensitivity(*model, tokens, options, &imatrix, [&](const TensorSensitivity&) {
        progress.update(++done);
      });
  progress.finish();

  // The budget for the measured matrices: bits per weight over them, or the file size less the
  // other tensors (their types do not change) and the header (as large as the input's).
  int64_t elements = 0, fixed = 0;
  std::map<std::string, const TensorSensitivity*> by_name;
  for (const TensorSensitivity& s : measured) elements += s.elements, by_name[s.name] = &s;
  const auto& tensors = model->file().tensors();
  int64_t input_tensor_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    input_tensor_bytes += int64_t(tensors[i].num_bytes);
    if (by_name.count(tensors[i].name) == 0) {
      fixed += all[i].type == tensors[i].type ? int64_t(tensors[i].num_bytes)
                                               : tensors[i].num_elements * int64_t(dtype_layout(all[i].type).block_bytes) /
                                                     dtype_layout(all[i].type).block_size;
    }
  }
  // The input's header and padding, plus room for each tensor's padding to change (alignment 32).
  std::string unmeasured;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (all[i].quantized && by_name.count(tensors[i].name) == 0) {
      unmeasured += fmt::format("{}{} ({})", unmeasured.empty() ? "" : ", ", tensors[i].name, dtype_name(all[i].type));
    }
  }
  if (!unmeasured.empty()) fmt::print(stderr, "auto: not measured (fused or expert tensors), kept at Q4_K: {}\n", unmeasured);
  const int64_t header = int64_t(std::filesystem::file_size(o.input)) - input_tensor_bytes + 32 * int64_t(tensors.size());
  const int64_t budget = o.target_bpw > 0 ? int64_t(o.target_bpw / 8.0 * double(elements))
                                          : int64_t(o.target_size_gib * double(int64_t(1) << 30)) - fixed - header;
  std::vector<calib::TensorOptions> inputs;
  for (const TensorSensitivity& s : measured) inputs.push_back(s.options());
  const calib::MixedPrecisionPlan plan = calib::plan_mixed_precision(inputs, budget);

  std::map<std::string, DType> chosen;
  std::map<DType, std::pair<int, int64_t>> per_type;  // tensors, bytes
  fmt::print("\nauto plan (cost: expected mean KLD with this tensor alone in its type; sorted by the probe's KLD)\n");
  fmt::print("{:<32} {:>8} {:>12} {:>8} {:>12} {:>10}\n", "tensor", "probe", "probe KLD", "type", "cost", "MiB");
  std::vector<size_t> order(measured.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return measured[a].probe_kld > measured[b].probe_kld; });
  for (size_t i : order) {
    const TensorSensitivity& s = measured[i];
    const DType type = plan.types[i];
    const size_t k = size_t(std::find(s.types.begin(), s.types.end(), type) - s.types.begin());
    const double cost = inputs[i].options[k].cost;
    chosen[s.name] = type;
    per_type[type].first += 1, per_type[type].second += s.bytes[k];
    fmt::print("{:<32} {:>8} {:>12.6f} {:>8} {:>12.3g} {:>10.2f}\n", s.name, dtype_name(s.probe_type), s.probe_kld,
               dtype_name(type), cost, mib(s.bytes[k]));
  }
  std::string mix;
  for (const auto& [type, count] : per_type) {
    mix += fmt::format("{}{}: {} tensors, {:.1f} MiB", mix.empty() ? "" : "; ", dtype_name(type), count.first, mib(count.second));
  }
  fmt::print("plan: {}\n", mix);
  fmt::print("plan: {:.1f} MiB of matrices = {:.3f} bits per weight (budget {:.1f} MiB); expected mean KLD from the "
             "weights' rounding {:.5f}\n",
             mib(plan.bytes), 8.0 * double(plan.bytes) / double(elements), mib(budget), plan.cost);

  QuantRecipe recipe = pure_quant_recipe(DType::Q4_K);
  recipe.name = "auto";
  recipe.file_type = 1024;  // LLAMA_FTYPE_GUESSED: llama.cpp's value for a mixture it has no name for
  recipe.tensor_types = &chosen;
  int weighted = 0;
  requantize_gguf(o.input, o.output, recipe, [&](const RequantizeNote& note) { weighted += note.weighted; },
                  o.threads, &imatrix);
  const int64_t size = int64_t(std::filesystem::file_size(o.output));
  fmt::print("wrote {}: {:.1f} MiB ({:.4f} GiB), {} tensors with importance weights\n", o.output, mib(size),
             double(size) / double(int64_t(1) << 30), weighted);

  // The result against the base on the same calibration chunks (in-sample: `kestrel eval` on other
  // text is the real measure).
  const auto result = Model::load(o.output);
  PerplexityOptions run = options.perplexity;
  run.kv = result->kv_spec(DType::F16, DType::F16);
  run.base_model = model.get();
  run.base_kv = model->kv_spec(DType::F16, DType::F16);
  const PerplexityResult r = compute_perplexity(*result, tokens, run, nullptr);
  // The measurement also holds what the cost model leaves out: the kernels' 8-bit activations
  // (the same for every candidate with Q8_0/Q8_K activations, so no choice depends on it) and the
  // tensors' interactions.
  fmt::print("measured on the {} calibration chunks: mean KLD {:.5f} +/- {:.5f} (weights' rounding expected {:.5f}; the "
             "rest is the kernels' 8-bit activations and interactions), same top-1 {:.2f}%, PPL {:.4f} (base {:.4f})\n",
             r.num_chunks, r.kld->mean, r.kld->mean_error, plan.cost, 100.0 * r.kld->top1_agreement, r.perplexity,
             r.base_perplexity.value_or(0.0));
  fmt::print(stderr, "auto: {:.1f} s\n",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace kestrel::cli
