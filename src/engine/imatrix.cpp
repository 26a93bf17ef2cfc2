#include "engine/imatrix.h"

#include "engine/calibration_pass.h"

#include <cmath>

#include "core/error.h"

namespace kestrel {

namespace {

// Adds x [n][cols]'s squares to matrix `mat` of entry `name` (made with n_mat matrices on first use).
void accumulate(ImportanceMatrix& matrix, const std::string& name, int64_t mat, int64_t n_mat, const float* x,
                int64_t n, int64_t cols) {
  ImatrixEntry& e = matrix.entries[name];
  if (e.counts.empty()) {
    e.sum2.assign(size_t(n_mat * cols), 0.0);
    e.counts.assign(size_t(n_mat), 0);
  }
  if (e.n_in() != cols || int64_t(e.counts.size()) != n_mat) {
    fail("internal: '{}' seen as {} x {} and {} x {}", name, e.counts.size(), e.n_in(), n_mat, cols);
  }
  double* acc = e.sum2.data() + mat * cols;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x + t * cols;
    for (int64_t c = 0; c < cols; ++c) acc[c] += double(row[c]) * double(row[c]);
  }
  e.counts[size_t(mat)] += n;
  for (int64_t c = 0; c < cols; ++c) {
    if (!std::isfinite(acc[c])) fail("non-finite activations reached '{}' (channel {})", name, c);
  }
}

}  // namespace

void ImatrixCollector::observe(int64_t layer, LinearKind kind, const float* x, int64_t n, int64_t cols) {
  if (kind == LinearKind::Output && !include_output_) return;
  accumulate(matrix_, linear_tensor_name(layer, kind), 0, 1, x, n, cols);
}

void ImatrixCollector::observe_stacked(int64_t layer, LinearKind kind, int64_t index, int64_t n_mat,
                                       const float* x, int64_t n, int64_t cols) {
  accumulate(matrix_, linear_tensor_name(layer, kind), index, n_mat, x, n, cols);
}

ImatrixResult compute_imatrix(const Model& model, std::span<const int32_t> tokens, PerplexityOptions options,
                              bool include_output, const std::string& dataset_name,
                              const std::function<void(int64_t, double)>& on_chunk) {
  if (const std::string limit = calibration_limit(model, /*names_only=*/true); !limit.empty()) {
    fail("imatrix does not support architecture '{}' yet ({})", model.config().architecture, limit);
  }
  ImatrixCollector collector(include_output);
  options.observer = &collector;
  options.all_logits = include_output;
  options.base_kv.reset();
  options.base_model = nullptr;
  ImatrixResult result;
  result.perplexity = compute_perplexity(model, tokens, options, on_chunk);
  result.matrix = std::move(collector.matrix());
  result.matrix.datasets = {dataset_name};
  result.matrix.chunk_count = result.perplexity.num_chunks;
  result.matrix.chunk_size = options.n_ctx;
  return result;
}

}  // namespace kestrel
