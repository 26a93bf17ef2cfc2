#include "perplexity_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "commands.h"
#include "core/error.h"

namespace kestrel::cli {

int64_t require_chunks(const std::string& file, size_t n_tokens, int64_t ctx, int64_t chunks,
                       const std::string& chunks_option, const std::string& ctx_option) {
  const int64_t available = int64_t(n_tokens) / ctx;
  const int64_t wanted = std::max<int64_t>(chunks, 1);
  if (available < wanted) {
    fail("{}: {} tokens make {} chunks of {} tokens, {} asked for ({}): use a longer text, fewer chunks or a "
         "smaller {}", file, n_tokens, available, ctx, wanted, chunks_option, ctx_option);
  }
  return available;
}

PerplexityOptions chunked_options(const Tokenizer& tokenizer, int64_t ctx, int64_t batch, int64_t chunks, int threads) {
  PerplexityOptions options;
  options.n_ctx = ctx;
  options.n_batch = std::max(batch, ctx);
  options.max_chunks = chunks;
  options.num_threads = threads > 0 ? threads : default_thread_count();
  options.bos_token = tokenizer.vocab().add_bos ? tokenizer.bos_id() : -1;
  return options;
}

void print_kld(const PerplexityResult& r, const std::string& base_label) {
  const KlDivergence& k = *r.kld;
  fmt::print("PPL ({}):{:>{}}{:.4f} +/- {:.5f}\n", base_label, "", std::max<int>(1, 9 - int(base_label.size())),
             *r.base_perplexity, *r.base_perplexity_error);
  fmt::print("PPL change:     {:+.4f}%\n", 100.0 * (r.perplexity / *r.base_perplexity - 1.0));
  fmt::print("Mean    KLD:    {:.6f} +/- {:.6f}\n", k.mean, k.mean_error);
  fmt::print("Median  KLD:    {:.6f}\n", k.median);
  fmt::print("90.0%   KLD:    {:.6f}\n", k.p90);
  fmt::print("99.0%   KLD:    {:.6f}\n", k.p99);
  fmt::print("99.9%   KLD:    {:.6f}\n", k.p999);
  fmt::print("Maximum KLD:    {:.6f}\n", k.max);
  fmt::print("Same top p:     {:.3f} %\n", 100.0 * k.top1_agreement);
  fmt::print("RMS Δp:         {:.3f} %\n", 100.0 * k.rms_delta_p);
}

void add_kld_json(nlohmann::json& j, const PerplexityResult& r) {
  const KlDivergence& k = *r.kld;
  j["ppl_base"] = *r.base_perplexity;
  j["ppl_base_error"] = *r.base_perplexity_error;
  j["kld_mean"] = k.mean;
  j["kld_mean_error"] = k.mean_error;
  j["kld_median"] = k.median;
  j["kld_p90"] = k.p90;
  j["kld_p99"] = k.p99;
  j["kld_p999"] = k.p999;
  j["kld_max"] = k.max;
  j["top1_agreement"] = k.top1_agreement;
  j["rms_delta_p"] = k.rms_delta_p;
}

}  // namespace kestrel::cli
