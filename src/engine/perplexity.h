// Perplexity the way llama.cpp's llama-perplexity computes it, so figures compare: the tokenized
// text (with BOS) is cut into non-overlapping chunks of n_ctx tokens; each chunk's first token is
// replaced by BOS; only the second half of each chunk is scored (each scored token has at least
// n_ctx/2 tokens of context). Several chunks run together as separate sequences of one batch.
//
// With base_kv, the same chunks also run over a second cache (e.g. F32 K/V) in the same pass, and
// the result adds the KL divergence of the candidate's next-token distributions from the base's
// (llama-perplexity --kl-divergence's statistics): how much a KV type changes the model. With
// base_model the base run is another model (a higher-precision encoding of the same weights).
//
// compute_streaming_perplexity instead streams the text as one sequence through a rolling window
// of n_ctx tokens with attention sinks (StreamingLLM), scoring every token from position n_ctx on:
// what a long generation past the context sees.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "core/kv_spec.h"
#include "model/model.h"
#include "runner/model_runner.h"

namespace kestrel {

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 2048;   // tokens per forward call: n_batch / n_ctx chunks at a time
  int64_t max_chunks = -1;  // -1: every whole chunk of the text
  int num_threads = 2;
  int32_t bos_token = -1;   // -1: keep each chunk's first token
  KvCacheSpec kv;           // K/V types, rotation, block size (n_kv_head, head_dim: the model's)
  std::optional<KvCacheSpec> base_kv;  // also score against this cache: KL divergence
  int sink_tokens = 4;      // streaming only
  int64_t max_tokens = -1;  // streaming only: tokens of the text to stream; -1: all
  // With base_model, the base run uses that model (same vocabulary; K/V in base_kv, or kv):
  // `kestrel eval`'s comparison of two encodings of one model.
  const Model* base_model = nullptr;
  // The group of ranks `model` is split over (dist/parallel.h; not owned; null: one process). Not
  // with a second (base) run: every rank would need that runner too.
  ParallelContext* parallel = nullptr;
  // Where the base run's scored logits rows go; if already filled (same text and options), they
  // are used instead of running the base again (per-tensor sensitivity reuses one base run).
  std::vector<float>* base_logits_cache = nullptr;
  // Sees every linear layer's input in the (candidate) run: the importance matrix's collector.
  ActivationObserver* observer = nullptr;
  bool all_logits = false;  // logits for every position (the observer then sees the output head's
                            // input for all tokens); scoring is unchanged
};

// The distribution of per-token KL divergences KL(base || candidate), in nats.
struct KlDivergence {
  double mean = 0.0;
  double mean_error = 0.0;  // standard error of the mean
  double median = 0.0, p90 = 0.0, p99 = 0.0, p999 = 0.0, max = 0.0;
  double top1_agreement = 0.0;  // share of tokens whose most likely next token is the same
  double rms_delta_p = 0.0;     // RMS of p_candidate(next) - p_base(next)
};

struct PerplexityResult {
  int64_t num_chunks = 0;
  int64_t num_scored_tokens = 0;
  double mean_nll = 0.0;
  double perplexity = 0.0;
  double perplexity_error = 0.0;  // llama.cpp's +/- estimate
  std::optional<double> base_perplexity;  // with base_kv
  std::optional<double> base_perplexity_error;
  std::optional<KlDivergence> kld;
};

// on_chunk(chunk_index, running perplexity) is called after each chunk, in order.
PerplexityResult compute_perplexity(const Model& model, std::span<const int32_t> tokens,
                                    const PerplexityOptions& options,
                                    const std::function<void(int64_t, double)>& on_chunk);

// on_progress(tokens streamed, running perplexity) after each forward call.
PerplexityResult compute_streaming_perplexity(const Model& model, std::span<const int32_t> tokens,
                                              const PerplexityOptions& options,
                                              const std::function<void(int64_t, double)>& on_progress);

}  // namespace kestrel
