// What each candidate type would cost each matrix of a model, for `kestrel quantize ... auto`
// (calib/mixed_precision.h has the cost model and the choice). Per matrix: every candidate type's
// size and importance-weighted squared error (sum over rows and columns of importance_c (w - w')^2,
// importance 1 where the imatrix has no entry, as for the token embedding), and one measured KL
// divergence from the base: the model with only that matrix in the probe type, on the calibration
// chunks, against the base's logits from one run (cached).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "calib/mixed_precision.h"
#include "convert/imatrix_file.h"
#include "engine/perplexity.h"
#include "model/model.h"

namespace kestrel {

struct TensorSensitivity {
  std::string name;
  int64_t elements = 0;
  DType probe_type = DType::F32;  // the probe, fitted to the rows (quant_type_that_fits)
  double probe_kld = 0.0;         // mean KLD with only this matrix in probe_type
  double probe_top1 = 1.0;        // and the top-1 agreement then
  std::vector<DType> types;       // the candidates, each fitted to the rows
  std::vector<int64_t> bytes;     // per candidate
  std::vector<double> errors;     // per candidate: the weighted squared error
  size_t probe_index = 0;         // the candidate that is the probe
  calib::TensorOptions options() const;  // the planner's input: bytes and scaled costs
};

struct SensitivityOptions {
  std::vector<DType> candidates;  // types a matrix may take (writable formats)
  DType probe = DType::Q3_K;      // one of candidates
  PerplexityOptions perplexity;   // calibration chunks; base_model and base_logits_cache are set here
  int num_threads = 0;
};

// The matrices `kestrel quantize` would quantize (2-D: token embedding, output head, layer
// matrices) and the model can swap (Model::can_replace_matrix: not fused, expert or latent-attention
// tensors other than attn_q): their indices in the file's tensor list.
std::vector<size_t> sensitivity_tensors(const Model& model);

// Each of sensitivity_tensors(model), in file order, measured; `on_tensor` after each. The model
// is left as loaded.
std::vector<TensorSensitivity> measure_tensor_sensitivity(
    Model& model, const std::vector<TokenId>& tokens, const SensitivityOptions& options,
    const ImportanceMatrix* imatrix, const std::function<void(const TensorSensitivity&)>& on_tensor);

}  // namespace kestrel
