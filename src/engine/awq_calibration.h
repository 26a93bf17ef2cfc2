// AWQ over a whole model (calib/awq.h), in the layer-by-layer calibration pass
// (engine/calibration_pass.h): the float model runs unchanged (AutoAWQ also searches every block
// on the float model's activations), one pass a layer over every slice of the calibration, which
// gathers each input's statistics (calib/awq_input.h); at the pass's end the layer's four input
// groups are scaled and clipped in turn:
//   q/k/v      scales folded into attn_norm; v clipped (q and k are not: AutoAWQ's rule, attention
//              scores are sensitive to clamped weights)
//   output     scales tied over the query heads of each kv head (GQA) and folded into v's rows
//              (and v's bias)
//   gate/up    folded into ffn_norm; both clipped; with awq.mlp_output_error the scales are chosen
//              by the error at the MLP's output (through the float down projection, as AutoAWQ)
//   down       folded into up's rows (down's input is act(gate) * up)
// Then every matrix of the layer is encoded in the type the recipe gives it (with the imatrix of
// its scaled input, E[x^2] / s^2, for types that weigh error), and the changed norms and biases as
// F32. Everything else (embedding, output head) is left to the recipe. With awq.smooth_alpha >= 0
// the scales are SmoothQuant's (calib::smoothquant_scales, from each channel's max |x| over the
// pass) and nothing is clipped.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "calib/awq.h"
#include "convert/requantize.h"
#include "core/dtype.h"
#include "engine/calibration_pass.h"
#include "model/model.h"

namespace kestrel {

struct AwqCalibrationOptions {
  CalibrationPass pass;
  calib::AwqOptions awq;
  int64_t search_tokens = 2048;  // tokens (evenly spaced over the pass) the scale search measures on
  // Store every matrix in this type instead of its target (F32: the scaled float model, for GPTQ
  // to round afterwards); the scales are still searched for the targets.
  std::optional<DType> store_type;
};

// One input group of one layer.
struct AwqGroupReport {
  int64_t layer = 0;
  std::string group;  // "attn_qkv", "attn_output", "ffn_gate_up", "ffn_down"
  int grid = -1;      // ratio grid / n_grid chosen; -1: no scaling
  int n_grid = 0;
  double loss = 0.0, loss_unscaled = 0.0;  // output error with the scales, and with plain rounding
  calib::AwqClipResult clip;               // over the group's clipped layers
  double seconds = 0.0;
};

// Scales, clips and encodes every layer matrix of `model` (targets: each one's type; all seven
// matrices of every layer must be there, since the scales change all of them) and returns their
// encodings with the changed norms and biases (F32). on_group after each group.
std::map<std::string, EncodedTensor> awq_quantize_model(const Model& model, std::span<const int32_t> tokens,
                                                        const std::map<std::string, DType>& targets,
                                                        const AwqCalibrationOptions& options,
                                                        const std::function<void(const AwqGroupReport&)>& on_group);

}  // namespace kestrel
