// AWQ (Lin et al., 2023, "AWQ: Activation-aware Weight Quantization for LLM Compression and
// Acceleration"): before rounding, scale each input channel c of the linear layers that read one
// input by s_c (W' = W diag(s)) and fold 1/s into whatever produced that input (a norm's weights,
// or the rows of the previous linear layer), so the float model computes exactly what it did but
// the channels that carry large activations are rounded on a finer relative grid. s is searched on
// a grid, as AutoAWQ does: for ratio a in {0, 1/n, ..., (n-1)/n},
//   s = x_mean^a / (w_mean^(1-a) + 1e-4)      (duo scaling; x_mean^a without it), s >= 1e-4,
//   s /= sqrt(max(s) min(s)),
// with x_mean the channel's mean |x| over the calibration tokens and w_mean its mean of |w| / (the
// largest |w| of the weight's group); the candidate with the lowest output error
//   sum over the group's layers of || X (Q(W diag(s)) diag(s)^-1 - W)^T ||^2
// wins, where Q is the target format's own quantizer (importance-weighted with the imatrix
// E[x^2] / s^2 of the scaled input when the format has a weighted quantizer). Unlike AutoAWQ, "no
// scaling" (s = 1) is a candidate too, so the search never returns a higher output error than
// plain rounding. The output error is the layers' own, except for gate/up given an AwqMlp: there it
// is the MLP's output, as AutoAWQ measures it (AutoAWQ also measures q/k/v through the whole
// attention block; Kestrel measures them at their own outputs).
//
// Then the clipping search (AutoAWQ's auto_clip): per output row and quantization group, the
// weights are clamped to +-max|w| x (1 - i/n) for i < max_shrink x n, and the clamp with the lowest
// output error of that group kept; the group's error d^T H_g d uses the group's block of the
// input's second moments over ALL calibration tokens (AutoAWQ samples 512 tokens). Formats whose
// quantizer chooses its scales over more than one group jointly (the k-quants) are not clipped.
//
// GQA: the output projection's input channels are the query heads' value vectors, and a kv head's
// value rows feed n_head / n_head_kv query heads, so folding 1/s into v's rows needs s equal on
// those heads' channels: with `tying`, x_mean and w_mean are averaged over the query heads that
// share a kv head and the scales searched on that tied vector (AutoAWQ skips o_proj under GQA).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "calib/awq_input.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace kestrel::calib {

struct AwqOptions {
  int n_grid = 20;           // scale ratios 0, 1/n_grid, ..., (n_grid - 1)/n_grid; clip steps 1/n_grid
  bool duo_scaling = true;   // s = x_mean^a / w_mean^(1-a) (AutoAWQ's default); false: x_mean^a
  bool clip = true;          // the clipping search (formats that allow it)
  double max_shrink = 0.5;   // clamps down to max|w| x (1 - max_shrink)
  int fixed_grid = -1;       // >= 0: no search, ratio fixed_grid / n_grid (tests of the folding)
  bool mlp_output_error = false;  // gate/up: the error at the MLP's output (AwqMlp), as AutoAWQ measures it
  // >= 0: SmoothQuant's scales with this migration strength (smoothquant_scales) instead of the
  // search; no clipping.
  double smooth_alpha = -1.0;
  // Not empty: SmoothQuant with the strength searched among these (smoothquant_search).
  std::vector<double> smooth_alphas;
};

// A linear layer reading the group's input: float weights [rows][cols] (scaled and clipped in
// place) and the type it is to be stored as.
struct AwqLinear {
  DType type;
  float* w;
  int64_t rows;
};

// The group's input statistics over the calibration tokens.
struct AwqInput {
  int64_t cols = 0;
  const float* x = nullptr;          // [n][cols]: the tokens the scale search measures the error on
  int64_t n = 0;
  std::span<const float> abs_mean;   // [cols] mean |x_c| over every calibration token
  std::span<const float> sq_mean;    // [cols] mean x_c^2 (the imatrix); empty: quantize unweighted
  std::span<const float> abs_max;    // [cols] max |x_c| over every calibration token (SmoothQuant)
};

// Channel c = h * head_dim + d of query head h shares its scale with the other query heads of h's
// kv head (h / (n_head / n_head_kv)). n_head == 0: every channel free.
struct AwqTying {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
};

// The gated MLP that the gate/up group feeds. Given, the scale search measures a candidate's error
// where AutoAWQ does (its module2inspect = the MLP): at the MLP's output,
//   || (act(X G'^T + bg) * (X U'^T + bu)) D^T - (act(X G^T + bg) * (X U^T + bu)) D^T ||^2
// with G' = Q(G diag(s)) diag(s)^-1 and U' likewise, D the float down projection (AutoAWQ rounds
// only the group's own layers during the search). The layers must be {gate, up}.
struct AwqMlp {
  const float* down = nullptr;  // [n_embd][n_ff]
  int64_t n_embd = 0;
  bool gelu_tanh = false;       // act = GELU (tanh approximation); else SiLU
  const float* gate_bias = nullptr;  // [n_ff] or null
  const float* up_bias = nullptr;    // [n_ff] or null
};

struct AwqScaleResult {
  std::vector<float> scales;   // [cols]; all 1 when no scaling won
  int grid = -1;               // the ratio chosen (grid / n_grid); -1: no scaling
  double loss = 0.0;           // output error of the chosen scales
  double loss_unscaled = 0.0;  // output error of plain rounding (s = 1)
};

// Searches the scales for the linear layers reading `input` (they must share its cols; each
// type's rows must divide into its blocks). Leaves the weights unchanged.
// `mlp`: measure at the MLP's output (see AwqMlp) instead of the layers' own outputs.
AwqScaleResult awq_search_scales(std::span<const AwqLinear> linears, const AwqInput& input,
                                 const AwqTying& tying, const AwqOptions& options, ThreadPool& pool,
                                 const AwqMlp* mlp = nullptr);

// SmoothQuant (Xiao et al., 2023, "SmoothQuant: Accurate and Efficient Post-Training Quantization
// for Large Language Models"): s_c = max|x_c|^alpha / max|w_c|^(1 - alpha), max|w_c| over every row
// of every layer reading the input, so the activation outliers of channel c move into its weights
// and a per-token int8 quantization of x / s (W8A8) loses less. Folded as AWQ's scales are; heads
// tied as there (the tied heads' maxima averaged). s = 1 where a channel's x or w is all zero.
std::vector<float> smoothquant_scales(std::span<const AwqLinear> linears, std::span<const float> x_abs_max,
                                      const AwqTying& tying, double alpha);

// SmoothQuant with the migration strength chosen per input group: for each alpha, the group's
// output error as the layers compute it after quantization, weights in their types and the
// scaled input x / s quantized as the layers' kernels quantize activations (W8A8: per token to
// int8), sum over layers || Qa(X diag(1/s)) Qw(W diag(s))^T - X W^T ||^2 on the input's sample
// tokens; the lowest wins, s = 1 (no smoothing, grid -1) included. `grid` is the chosen alpha's
// index, `loss_unscaled` the error with s = 1.
AwqScaleResult smoothquant_search(std::span<const AwqLinear> linears, const AwqInput& input, const AwqTying& tying,
                                  std::span<const double> alphas, ThreadPool& pool);

// W := W diag(scales) for each layer.
void awq_scale_columns(std::span<const AwqLinear> linears, int64_t cols, std::span<const float> scales,
                       ThreadPool& pool);

// True when the clipping search applies to `type`: its quantizer treats each block of at most 128
// values on its own (Kestrel's INT4 per-group formats, Q4_0, Q5_0, Q8_0, ...), not a k-quant.
bool awq_can_clip(DType type);

struct AwqClipResult {
  int64_t groups = 0, clipped = 0;  // quantization groups, and how many got a clamp
  double loss = 0.0, loss_unclipped = 0.0;  // summed per-group output errors
};

// Clamps each group of `linear` (already scaled by `scales`; moments of the UNSCALED input, with
// the format's block as group) to the clamp with the lowest output error. `importance`: the
// scaled input's imatrix, or empty.
AwqClipResult awq_clip(const AwqLinear& linear, int64_t cols, const BlockMoments& moments,
                       std::span<const float> scales, std::span<const float> importance,
                       const AwqOptions& options, ThreadPool& pool);

}  // namespace kestrel::calib
