// What perplexity, eval and imatrix share: chunking the text, and printing the
// KL-divergence statistics in llama-perplexity --kl-divergence's layout and as JSON fields.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

// How many whole chunks of ctx tokens the text's n_tokens make; a clear error naming the options
// when that is fewer than `chunks` (<= 0: at least one).
int64_t require_chunks(const std::string& file, size_t n_tokens, int64_t ctx, int64_t chunks,
                       const std::string& chunks_option, const std::string& ctx_option);
// Chunking, batch, threads (0: the available CPUs) and BOS as perplexity, eval and imatrix all take them;
// the caller sets the K/V types.
PerplexityOptions chunked_options(const Tokenizer& tokenizer, int64_t ctx, int64_t batch, int64_t chunks, int threads);
// "PPL (base):", "PPL change:", "Mean KLD:" ... "RMS Δp:"; base_label names the base ("base KV").
void print_kld(const PerplexityResult& r, const std::string& base_label);
// ppl_base, kld_mean, kld_mean_error, kld_median, kld_p90, kld_p99, kld_p999, kld_max,
// top1_agreement, rms_delta_p.
void add_kld_json(nlohmann::json& j, const PerplexityResult& r);

}  // namespace kestrel::cli
