// Computing an importance matrix (llama-imatrix's method): the text is cut into chunks of n_ctx
// tokens exactly as perplexity does (each chunk starts with BOS), every chunk runs through the
// model, and every linear layer's input is accumulated as per-channel sums of squares over all of
// the chunk's tokens. The output head is left out unless asked for (llama-imatrix's
// --process-output), as it is too big to quantize low anyway. A head tied to the token embedding
// is always counted, under the embedding's name (llama-imatrix never records it): nothing else
// measures that tensor (a lookup has no inputs), and the rows it sees are those whose logits the
// perplexity computes anyway (every row with include_output).
#pragma once

#include <functional>
#include <span>
#include <string>

#include "convert/imatrix_file.h"
#include "engine/perplexity.h"
#include "model/activation_observer.h"

namespace kestrel {

// Sums x^2 per input channel of every linear layer it is shown, in double precision.
class ImatrixCollector : public ActivationObserver {
 public:
  explicit ImatrixCollector(bool include_output) : include_output_(include_output) {}
  void observe(int64_t layer, LinearKind kind, const float* x, int64_t n, int64_t cols) override;
  // One matrix of a 3-D stack (a routed expert; a latent-attention head's): entry [n_mat][cols] with
  // one count per matrix (llama-imatrix's layout for a MUL_MAT_ID; experts no token reached keep
  // count 0; llama-imatrix gives a per-head stack one count for all heads, which fit_imatrix shares out).
  void observe_stacked(int64_t layer, LinearKind kind, int64_t index, int64_t n_mat, const float* x, int64_t n,
                       int64_t cols) override;
  ImportanceMatrix& matrix() { return matrix_; }

 private:
  bool include_output_;
  ImportanceMatrix matrix_;
};

struct ImatrixResult {
  ImportanceMatrix matrix;
  PerplexityResult perplexity;  // of the chunks it ran over, as llama-imatrix prints
};

// options as for compute_perplexity (n_ctx, n_batch, max_chunks, threads, bos, K/V types);
// on_chunk(chunk index, running perplexity) after each chunk.
ImatrixResult compute_imatrix(const Model& model, std::span<const int32_t> tokens, PerplexityOptions options,
                              bool include_output, const std::string& dataset_name,
                              const std::function<void(int64_t, double)>& on_chunk);

}  // namespace kestrel
