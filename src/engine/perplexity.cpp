#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache_manager.h"
#include "sample/log_softmax.h"

namespace kestrel {
namespace {

// Negative log-likelihoods of the scored tokens, for perplexity and llama.cpp's +/- estimate.
struct NllSum {
  double sum = 0.0, sum2 = 0.0;
  int64_t count = 0;
  void add(double nll) {
    sum += nll;
    sum2 += nll * nll;
    ++count;
  }
  double mean() const { return count > 0 ? sum / double(count) : 0.0; }
  double perplexity() const { return std::exp(mean()); }
  double error() const {
    const double n = double(count);
    const double variance = sum2 / n - mean() * mean();
    return variance > 0 && n > 1 ? std::sqrt(variance / (n - 1)) * perplexity() : 0.0;
  }
};

struct KldStats {
  std::vector<double> values;
  int64_t same_top = 0;
  double delta_p2 = 0.0;

  // Both rows predict `next`.
  void add(std::span<const float> base, std::span<const float> candidate, int32_t next) {
    const LogSoftmax lb(base), lc(candidate);
    double kl = 0.0;
    for (size_t v = 0; v < base.size(); ++v) {
      const double log_pb = lb.log_p(base[v]);
      kl += std::exp(log_pb) * (log_pb - lc.log_p(candidate[v]));
    }
    values.push_back(std::max(0.0, kl));
    same_top += (std::max_element(base.begin(), base.end()) - base.begin()) ==
                (std::max_element(candidate.begin(), candidate.end()) - candidate.begin());
    const double dp = std::exp(lc.log_p(candidate[size_t(next)])) - std::exp(lb.log_p(base[size_t(next)]));
    delta_p2 += dp * dp;
  }

  KlDivergence summary() const {
    KlDivergence k;
    const double n = double(values.size());
    if (values.empty()) return k;
    double sum = 0.0, sum2 = 0.0;
    for (double v : values) sum += v, sum2 += v * v;
    k.mean = sum / n;
    const double variance = sum2 / n - k.mean * k.mean;
    k.mean_error = variance > 0 && n > 1 ? std::sqrt(variance / (n - 1)) : 0.0;
    std::vector<double> sorted = values;
    std::sort(sorted.begin(), sorted.end());
    auto at = [&](double q) { return sorted[std::min(sorted.size() - 1, size_t(q * n))]; };
    k.median = at(0.5);
    k.p90 = at(0.9);
    k.p99 = at(0.99);
    k.p999 = at(0.999);
    k.max = sorted.back();
    k.top1_agreement = double(same_top) / n;
    k.rms_delta_p = std::sqrt(delta_p2 / n);
    return k;
  }
};

// The base and the candidate must score the same tokens with the same vocabulary.
void check_same_vocabulary(const Model& base, const Model& candidate) {
  const ModelConfig &b = base.config(), &c = candidate.config();
  if (b.n_vocab != c.n_vocab) {
    fail("{} has a vocabulary of {} tokens, {} of {}: not two encodings of one model", base.file().name(),
         b.n_vocab, candidate.file().name(), c.n_vocab);
  }
  if (b.n_layer != c.n_layer || b.n_embd != c.n_embd || b.n_head != c.n_head || b.n_ff != c.n_ff) {
    fail("{} ({} layers, width {}, {} heads, FFN {}) and {} ({} layers, width {}, {} heads, FFN {}) are "
         "different architectures", base.file().name(), b.n_layer, b.n_embd, b.n_head, b.n_ff,
         candidate.file().name(), c.n_layer, c.n_embd, c.n_head, c.n_ff);
  }
}

void fill_result(PerplexityResult& r, const NllSum& nll) {
  r.num_scored_tokens = nll.count;
  r.mean_nll = nll.mean();
  r.perplexity = nll.perplexity();
  r.perplexity_error = nll.error();
}

}  // namespace

PerplexityResult compute_perplexity(const Model& model, std::span<const int32_t> tokens,
                                    const PerplexityOptions& o,
                                    const std::function<void(int64_t, double)>& on_chunk) {
  if (o.n_ctx < 4) fail("perplexity context must be at least 4 tokens, got {}", o.n_ctx);
  int64_t num_chunks = int64_t(tokens.size()) / o.n_ctx;
  if (o.max_chunks >= 0) num_chunks = std::min(num_chunks, o.max_chunks);
  if (num_chunks < 1) {
    fail("the text has {} tokens, fewer than one context of {} tokens", tokens.size(), o.n_ctx);
  }
  const int64_t seqs_per_batch = std::max<int64_t>(1, o.n_batch / o.n_ctx);
  const int block_size = o.kv.block_size;
  const int64_t blocks_per_seq = (o.n_ctx + block_size - 1) / block_size;

  const int num_groups = int(model.kv_layout().group_windows.size());
  if (o.base_model != nullptr && int(o.base_model->kv_layout().group_windows.size()) != num_groups) {
    fail("the base and candidate models have different layer layouts");
  }
  auto make_runner = [&](const Model& m, const KvCacheSpec& kv, ParallelContext* parallel = nullptr) {
    RunnerConfig config;
    config.parallel = parallel;
    config.num_threads = o.num_threads;
    config.kv = kv;
    config.kv.rolling_window = 0;
    config.kv.sink_tokens = 0;
    // The context is one chunk, as llama-perplexity's n_ctx (LongRoPE picks its factors by it).
    if (config.kv.context_length == 0) config.kv.context_length = o.n_ctx;
    config.group_blocks.assign(size_t(int(m.kv_layout().group_windows.size())), blocks_per_seq * seqs_per_batch);
    return std::make_unique<ModelRunner>(m, config);
  };
  const Model* base_model = o.base_model;
  if (base_model != nullptr) check_same_vocabulary(*base_model, model);
  if (base_model == nullptr && o.base_kv) base_model = &model;
  const int64_t rows_per_seq = o.n_ctx - o.n_ctx / 2;
  const int64_t base_rows = num_chunks * rows_per_seq * model.config().n_vocab;
  const bool cached = o.base_logits_cache != nullptr && int64_t(o.base_logits_cache->size()) == base_rows;
  if (o.base_logits_cache != nullptr && !cached) {
    o.base_logits_cache->clear();
    o.base_logits_cache->reserve(size_t(base_rows));
  }
  if (o.parallel != nullptr && (base_model != nullptr || o.base_kv)) {
    fail("KL divergence runs (--kld-kv-type, eval) need the model in one process: drop --tp/--pp");
  }
  const auto runner = make_runner(model, o.kv, o.parallel);
  if (o.observer) runner->set_activation_observer(o.observer);
  const auto base_runner = base_model != nullptr && !cached
                               ? make_runner(*base_model, o.base_kv ? *o.base_kv : o.kv) : nullptr;
  const bool compare = base_model != nullptr;

  // Each sequence of a batch gets its own fixed range of blocks in every group; every chunk
  // starts afresh (a sliding group simply keeps the whole chunk: it is short).
  std::vector<std::vector<BlockId>> tables(static_cast<size_t>(seqs_per_batch));
  for (int64_t s = 0; s < seqs_per_batch; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[size_t(s)].push_back(BlockId(s * blocks_per_seq + b));
  }

  const int64_t first = o.n_ctx / 2;
  const int64_t n_vocab = model.config().n_vocab;
  PerplexityResult result;
  NllSum nll, base_nll;
  KldStats kld;
  std::vector<float> base_logits;
  std::vector<std::vector<int32_t>> chunk_tokens(static_cast<size_t>(seqs_per_batch));
  for (int64_t chunk = 0; chunk < num_chunks; chunk += seqs_per_batch) {
    const int64_t n_seq = std::min(seqs_per_batch, num_chunks - chunk);
    std::vector<SequenceChunk> chunks;
    for (int64_t s = 0; s < n_seq; ++s) {
      auto& ct = chunk_tokens[size_t(s)];
      const auto begin = tokens.begin() + std::ptrdiff_t((chunk + s) * o.n_ctx);
      ct.assign(begin, begin + std::ptrdiff_t(o.n_ctx));
      if (o.bos_token >= 0) ct[0] = o.bos_token;
      SequenceChunk c;
      c.tokens = ct;
      c.start_position = 0;
      c.block_tables.assign(size_t(num_groups), tables[size_t(s)]);
      c.logits_from = first;  // logits only where they are scored
      chunks.push_back(c);
    }
    const float* base_logits_data = nullptr;
    if (base_runner) {
      const std::span<float> b = base_runner->execute(chunks);
      if (o.base_logits_cache != nullptr) {
        o.base_logits_cache->insert(o.base_logits_cache->end(), b.begin(), b.end());
        base_logits_data = o.base_logits_cache->data() + chunk * rows_per_seq * n_vocab;
      } else {
        base_logits.assign(b.begin(), b.end());
        base_logits_data = base_logits.data();
      }
    } else if (cached) {
      base_logits_data = o.base_logits_cache->data() + chunk * rows_per_seq * n_vocab;
    }
    // With all_logits the rows before `first` are computed (for the observer) and skipped here.
    const int64_t skip_rows = o.all_logits ? first : 0;
    if (o.all_logits) {
      for (auto& c : chunks) c.logits_from = 0;
    }
    const std::span<float> logits = runner->execute(chunks);
    // Logit row j of a chunk's scored part (token first + j) predicts token first + j + 1.
    const int64_t out_rows_per_seq = rows_per_seq + skip_rows;
    for (int64_t s = 0; s < n_seq; ++s) {
      const auto& ct = chunk_tokens[size_t(s)];
      for (int64_t j = 0; j + first + 1 < o.n_ctx; ++j) {
        const size_t offset = size_t((s * rows_per_seq + j) * n_vocab);
        const std::span<const float> row(logits.data() + (s * out_rows_per_seq + skip_rows + j) * n_vocab,
                                         size_t(n_vocab));
        const int32_t next = ct[size_t(first + j + 1)];
        nll.add(-LogSoftmax(row).log_p(row[size_t(next)]));
        if (compare) {
          const std::span<const float> base_row(base_logits_data + offset, size_t(n_vocab));
          base_nll.add(-LogSoftmax(base_row).log_p(base_row[size_t(next)]));
          kld.add(base_row, row, next);
        }
      }
      ++result.num_chunks;
      if (on_chunk) on_chunk(chunk + s, nll.perplexity());
    }
  }
  fill_result(result, nll);
  if (compare) {
    result.base_perplexity = base_nll.perplexity();
    result.base_perplexity_error = base_nll.error();
    result.kld = kld.summary();
  }
  return result;
}

PerplexityResult compute_streaming_perplexity(const Model& model, std::span<const int32_t> tokens,
                                              const PerplexityOptions& o,
                                              const std::function<void(int64_t, double)>& on_progress) {
  const int64_t window = o.n_ctx;
  const int64_t total = o.max_tokens > 0 ? std::min<int64_t>(o.max_tokens, int64_t(tokens.size()))
                                         : int64_t(tokens.size());
  if (total <= window) {
    fail("streaming perplexity needs a text longer than the window: {} tokens for a window of {}", total, window);
  }
  KvCacheSpec spec = o.kv;
  spec.rolling_window = window;
  spec.sink_tokens = o.sink_tokens;
  if (spec.context_length == 0) spec.context_length = window;
  const int bs = spec.block_size;
  const int64_t chunk_tokens = std::max<int64_t>(1, std::min<int64_t>(o.n_batch, window));
  const KvLayout layout = model.kv_layout(spec.rolling_window, spec.sink_tokens);
  // Each group holds one sequence: its sinks, its window and a chunk in flight.
  std::vector<KVCacheGroupSpec> groups;
  RunnerConfig config;
  config.num_threads = o.num_threads;
  config.kv = spec;
  config.parallel = o.parallel;
  for (size_t g = 0; g < layout.group_windows.size(); ++g) {
    const int w = layout.group_windows[g], sinks = layout.group_sinks[g];
    const int64_t blocks = (sinks + bs - 1) / bs + (w - sinks + bs - 1) / bs + (chunk_tokens + bs - 1) / bs + 2;
    groups.push_back({int32_t(blocks), w, sinks});
    config.group_blocks.push_back(blocks);
  }
  KVCacheManager kv(groups, bs, /*enable_prefix_caching=*/false);
  ModelRunner runner(model, config);

  const int64_t n_vocab = model.config().n_vocab;
  const RequestId id = 1;
  NllSum nll;
  PerplexityResult result;
  for (int64_t pos = 0; pos < total - 1; pos += chunk_tokens) {
    const int64_t n = std::min(chunk_tokens, total - 1 - pos);  // the last token is only predicted
    if (!kv.allocate_slots(id, pos + n, nullptr, pos)) fail("internal: the streaming KV pool ran dry");
    SequenceChunk c;
    c.tokens = tokens.subspan(size_t(pos), size_t(n));
    c.start_position = pos;
    for (int g = 0; g < kv.num_groups(); ++g) c.block_tables.push_back(kv.block_table(id, g));
    // Row i predicts token pos + i + 1; scored from position `window` on.
    const int64_t from = std::max<int64_t>(0, window - 1 - pos);
    c.logits_from = from < n ? from : -1;
    const std::span<float> logits = runner.execute(std::span<const SequenceChunk>(&c, 1));
    if (c.logits_from >= 0) {
      for (int64_t i = from; i < n; ++i) {
        const std::span<const float> row(logits.data() + (i - from) * n_vocab, size_t(n_vocab));
        nll.add(-LogSoftmax(row).log_p(row[size_t(tokens[size_t(pos + i + 1)])]));
      }
    }
    if (on_progress) on_progress(pos + n, nll.count > 0 ? nll.perplexity() : 0.0);
  }
  kv.free(id);
  result.num_chunks = 1;
  fill_result(result, nll);
  return result;
}

}  // namespace kestrel
