// kestrel eval BASE CANDIDATE -f TEXT: what an encoding of a model costs, measured on the user's
// own text. Both models score the same chunks (llama-perplexity's chunking, as `kestrel
// perplexity`); prints both perplexities, the change, and the KL divergence of the candidate's
// next-token distributions from the base's (llama-perplexity --kl-divergence's statistics).
//   --per-tensor   sensitivity: for each matrix whose type differs, the KLD when only that one
//                  tensor of the base takes the candidate's encoding, sorted by cost
//   --json         end with one JSON line (ppl_base, ppl, kld_mean, kld_p99, top1_agreement, ...)
#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/perplexity.h"
#include "kv_options.h"
#include "perplexity_report.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct EvalOptions {
  std::string base, candidate, file;
  int64_t ctx = 512;
  int64_t batch = 2048;
  int64_t chunks = -1;
  int threads = 0;
  KvOptions kv;
  bool per_tensor = false;
  bool json = false;
};

struct TensorCost {
  std::string name;
  DType base_type, candidate_type;
  PerplexityResult result;
};

// Each matrix of the candidate with another encoding than the base's, in file order.
std::vector<const gguf::TensorInfo*> differing_matrices(const Model& base, const Model& candidate) {
  std::vector<const gguf::TensorInfo*> out;
  for (const gguf::TensorInfo& t : candidate.file().tensors()) {
    if (t.dims.size() != 2) continue;
    const gguf::TensorInfo* b = base.file().find_tensor(t.name);
    if (b == nullptr || b->type == t.type || b->dims != t.dims) continue;
    if (t.name != "token_embd.weight" && t.name != "output.weight" && t.name.rfind("blk.", 0) != 0) continue;
    out.push_back(&t);
  }
  return out;
}

void eval(const EvalOptions& o) {
  const std::string text = read_input_file(o.file, "--file");
  const auto base = Model::load(o.base);
  const auto candidate = Model::load(o.candidate);
  const auto tokenizer = Tokenizer::from_gguf(base->file());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<TokenId> tokens = tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  if (int64_t(tokens.size()) < 2 * o.ctx) {
    fail("{}: {} tokens is fewer than 2 x ctx ({}); use a longer text or a smaller --ctx", o.file, tokens.size(),
         2 * o.ctx);
  }

  PerplexityOptions options = chunked_options(*tokenizer, o.ctx, o.batch, o.chunks, o.threads);
  options.kv = candidate->kv_spec(o.kv.k_type(), o.kv.v_type());
  options.kv.rotate = o.kv.rotate;
  validate_kv_spec(options.kv);
  options.base_kv = base->kv_spec(o.kv.k_type(), o.kv.v_type());
  options.base_kv->rotate = o.kv.rotate;
  options.base_model = base.get();
  std::vector<float> base_logits;
  if (o.per_tensor) options.base_logits_cache = &base_logits;

  const int64_t total_chunks = o.chunks >= 0 ? std::min<int64_t>(o.chunks, int64_t(tokens.size()) / o.ctx)
                                             : int64_t(tokens.size()) / o.ctx;
  fmt::print(stderr, "evaluating {} against {} over {} chunks of {} tokens, KV {}\n", o.candidate, o.base,
             total_chunks, o.ctx, options.kv.describe());
  PerplexityResult r;
  {
    ProgressBar progress("eval", total_chunks);
    r = compute_perplexity(*candidate, tokens, options, [&](int64_t chunk, double) { progress.update(chunk + 1); });
    progress.finish();
  }
  fmt::print("PPL (candidate): {:.4f} +/- {:.5f}\n", r.perplexity, r.perplexity_error);
  print_kld(r, "base");
  fmt::print("scored tokens:  {} ({} chunks)\n", r.num_scored_tokens, r.num_chunks);

  std::vector<TensorCost> costs;
  if (o.per_tensor) {
    const auto matrices = differing_matrices(*base, *candidate);
    if (matrices.empty()) fmt::print("per-tensor: every matrix has the same type in both files\n");
    ProgressBar progress("per-tensor", int64_t(matrices.size()));
    for (const gguf::TensorInfo* t : matrices) {
      const WeightView replacement{t->type, t->dims[1], t->dims[0], t->data};
      const WeightView original = base->replace_matrix(t->name, replacement);
      PerplexityOptions one = options;
      one.kv = options.base_kv.value();
      TensorCost cost{t->name, original.type, t->type, {}};
      try {
        cost.result = compute_perplexity(*base, tokens, one, nullptr);
      } catch (...) {
        base->replace_matrix(t->name, original);
        throw;
      }
      base->replace_matrix(t->name, original);
      costs.push_back(std::move(cost));
      progress.update(int64_t(costs.size()));
    }
    progress.finish();
    std::sort(costs.begin(), costs.end(),
              [](const TensorCost& a, const TensorCost& b) { return a.result.kld->mean > b.result.kld->mean; });
    if (!costs.empty()) {
      fmt::print("\nper-tensor sensitivity (only this tensor in the candidate's type; sorted by mean KLD)\n");
      fmt::print("{:<32} {:>7} {:>7} {:>12} {:>12} {:>10} {:>8}\n", "tensor", "base", "cand", "mean KLD",
                 "99% KLD", "PPL chg", "same top");
      for (const TensorCost& c : costs) {
        const KlDivergence& k = *c.result.kld;
        fmt::print("{:<32} {:>7} {:>7} {:>12.6f} {:>12.6f} {:>+9.3f}% {:>7.2f}%\n", c.name, dtype_name(c.base_type),
                   dtype_name(c.candidate_type), k.mean, k.p99,
                   100.0 * (c.result.perplexity / *c.result.base_perplexity - 1.0), 100.0 * k.top1_agreement);
      }
    }
  }
  fmt::print(stderr, "{:.1f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (o.json) {
    nlohmann::json j = {{"ppl", r.perplexity}, {"ppl_error", r.perplexity_error}, {"scored_tokens", r.num_scored_tokens},
                        {"chunks", r.num_chunks}, {"ctx", o.ctx}, {"kv", options.kv.describe()}};
    add_kld_json(j, r);
    if (o.per_tensor) {
      nlohmann::json list = nlohmann::json::array();
      for (const TensorCost& c : costs) {
        nlohmann::json e = {{"tensor", c.name}, {"base_type", dtype_name(c.base_type)},
                            {"candidate_type", dtype_name(c.candidate_type)}, {"ppl", c.result.perplexity}};
        add_kld_json(e, c.result);
        list.push_back(std::move(e));
      }
      j["per_tensor"] = std::move(list);
    }
    fmt::print("{}\n", j.dump());
  }
}

}  // namespace

void register_eval(CLI::App& app) {
  auto options = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "what an encoding costs: perplexity of BASE and CANDIDATE and the KL divergence between them");
  cmd->add_option("base", options->base, "the reference model (e.g. F16)")->required();
  cmd->add_option("candidate", options->candidate, "the model to judge (e.g. a quantization of BASE)")->required();
  cmd->add_option("-f,--file", options->file, "text file (never the calibration text)")
      ->required()
      ->check(existing_file());
  cmd->add_option("-c,--ctx", options->ctx, "tokens per chunk")->check(int_range(4, 1 << 20));
  cmd->add_option("-b,--batch", options->batch, "tokens per forward call")->check(int_range(4, 1 << 22));
  cmd->add_option("--chunks", options->chunks, "score at most this many chunks (default: all)")
      ->check(int_range(1, 1 << 30));
  cmd->add_option("-t,--threads", options->threads, "threads (default: the available CPUs)")->check(int_range(1, 1024));
  add_kv_options(*cmd, options->kv, /*with_sinks=*/false);
  cmd->add_flag("--per-tensor", options->per_tensor,
                "also the KLD of each tensor alone in the candidate's type (one run per tensor)");
  cmd->add_flag("--json", options->json, "end with one JSON line of the figures");
  cmd->callback([options] { eval(*options); });
}

}  // namespace kestrel::cli
