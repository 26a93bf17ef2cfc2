// GPTQ over a whole model, layer by layer on the already-quantized layers' outputs: the
// calibration chunks run through the model one layer at a time over slices of chunks
// (run_layerwise_calibration, engine/calibration_pass.h). Each pass of a layer goes as far as the
// next input whose readers are still to be quantized, that input's Hessian gathers every slice's
// tokens, and its readers are quantized and the model pointed at them before the next pass. So
// every layer's Hessian comes from the inputs the quantized model really produces (AutoGPTQ's
// block-by-block order, and its "true sequential" order inside a block: q/k/v, then the output
// projection, gate/up, then down), and memory holds one slice's activations, not all chunks'.
// A finished layer's file pages are dropped (the mapped model then costs about a layer's weights).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "calib/gptq.h"
#include "convert/imatrix_file.h"
#include "convert/requantize.h"
#include "engine/calibration_pass.h"
#include "core/dtype.h"
#include "model/model.h"

namespace kestrel {

struct GptqCalibrationOptions {
  CalibrationPass pass;
  calib::GptqOptions gptq;
  bool measure_loss = true;  // each tensor's proxy loss for GPTQ and for round-to-nearest
};

struct GptqTensorReport {
  std::string name;
  DType type;
  int64_t rows = 0, cols = 0;
  int64_t samples = 0;  // calibration tokens the Hessian was built from
  calib::GptqStats stats;
  double hessian_seconds = 0.0;  // building the Hessian (reported with the first matrix that reads it)
  double seconds = 0.0;          // GPTQ of this matrix, loss measurement included
  // A stack (a MoE layer's experts, each GPTQ'd with a Hessian of the tokens routed to it; latent
  // attention's per-head matrices): its matrices (the stats summed over them), and how many no
  // calibration token reached (experts no token chose: rounded to nearest).
  int64_t stacked = 0, unseen = 0;
};

// Quantizes by GPTQ every matrix named in `targets` (name -> a type gptq_supports) that the
// forward pass reaches (the layers' linear matrices; not the embedding, nor a tied output head) and
// returns their encodings; `model` is left pointing at them. The tokens must hold n_chunks x n_ctx
// tokens (a clear error with both numbers otherwise). on_tensor is called after each tensor.
// With `imatrix`, it also receives the importance matrix of every linear layer's inputs over the
// same pass (llama-imatrix's statistics, on the partly quantized model): what the tensors GPTQ
// does not target (Q6_K in a Q4_K_M mixture) are quantized with.
std::map<std::string, EncodedTensor> gptq_quantize_model(
    Model& model, std::span<const int32_t> tokens, const std::map<std::string, DType>& targets,
    const GptqCalibrationOptions& options, const std::function<void(const GptqTensorReport&)>& on_tensor,
    ImportanceMatrix* imatrix = nullptr);

}  // namespace kestrel
