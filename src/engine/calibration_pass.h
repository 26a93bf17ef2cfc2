// The forward passes the calibrated quantizers (GPTQ, AWQ) learn from: the calibration chunks
// (n_ctx tokens each, BOS first when the model wants one, as perplexity cuts them) run through the
// model layer by layer over slices of chunks (AutoGPTQ's layer loop): only the residual stream of
// all tokens is kept between layers (4 x n_embd bytes a token), and each layer runs slice by slice
// as often as its observer needs, each time as far as the input it is learning from (GPTQ: a pass
// per input, so later inputs come from the quantized matrices; AWQ: one pass, on the float model).
// No logits are computed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"

#include "model/activation_observer.h"
#include "model/model.h"

namespace kestrel {

struct CalibrationPass {
  int64_t n_ctx = 512;
  int64_t n_chunks = 128;
  int32_t bos_token = -1;  // -1: keep each chunk's first token
  int num_threads = 2;
  bool stacks = false;     // the observer handles MoE expert stacks and latent attention (GPTQ); else refused
  // Chunks run through a layer at once by run_layerwise_calibration (0: as many as make 4096
  // tokens, at least one).
  int64_t slice_chunks = 0;
};

// The observer of run_layerwise_calibration. It may stop a slice's pass at the input it learns from
// (ForwardPassStopped); every slice then goes as far in that pass (the same inputs in the same
// order), and end_pass follows the pass's last slice, where the observer acts on what it saw (GPTQ
// quantizes the matrices whose inputs it collected, so the next pass computes with them). Inputs
// it has learned from in an earlier pass of the layer it lets through without stopping.
class LayerPassObserver : public ActivationObserver {
 public:
  // `stopped`: the pass ended at an input; else it went through the whole layer, whose outputs
  // are now the next layer's inputs (the layer's last pass).
  virtual void end_pass(int64_t layer, bool stopped) = 0;
};

// Why the calibrated quantizers cannot handle this model, or "" when they can. They write
// attn_q/k/v and ffn_gate/up tensors by name (`names_only`: the limit that matters to an
// importance matrix: fused tensors (Phi-3)) and AWQ folds scales into the RMSNorm before a
// matrix, so LayerNorm, blocks without input norms (OLMo 2), the parallel block (Cohere), the
// plain MLP (Starcoder2), and (unless `stacks`: GPTQ, expert by expert and head by head) latent
// attention and Mixture-of-Experts layers are not supported yet.
std::string calibration_limit(const Model& model, bool names_only = false, bool stacks = false);

// The calibration layer by layer: the chunks' residual stream [n_chunks x n_ctx][n_embd] (F32) is
// kept between layers, and each layer runs over it in slices of pass.slice_chunks chunks (their
// K/V in a cache for one slice), pass after pass until one goes through the whole layer. Memory:
// that residual stream, one slice's activations and K/V, and what the observer keeps. Throws (with
// both numbers) when the tokens do not hold n_chunks x n_ctx tokens, and (naming the architecture)
// for a model calibration_limit refuses; `method` names the caller in the errors ("GPTQ", "AWQ").
void run_layerwise_calibration(const Model& model, std::span<const int32_t> tokens, const CalibrationPass& pass,
                               LayerPassObserver& observer, const char* method);

// The matrices that read the input the forward pass shows with `kind`: q, k and v share theirs
// (shown as AttnQ, AttnK, AttnV in turn), gate and up theirs (a MoE layer's shared expert's too);
// the shared expert's sigmoid gate its own, latent attention's q_a, q_b and kv_a each its own (q_a
// and kv_a read the same input, shown twice); a routed expert's gate and up its rows, its down and
// each head's attn_k_b / attn_v_b their own; for the kinds shown after the first of a shared input
// (AttnK, AttnV, FfnUp, SharedUp, ExpertUp), for Output and the router, none.
std::vector<LinearKind> linear_readers_of(LinearKind kind);

// Drops the mapped file's pages of every matrix of `layer` (a calibration done with that layer's
// weights: the model's memory then stays about one layer's, not the whole file's); matrices in
// memory of their own are left alone.
void release_layer_pages(const Model& model, int64_t layer);

// A weight matrix [rows][cols] decoded to float, rows over the pool.
std::vector<float> dequantize_matrix(const WeightView& view, ThreadPool& pool);

}  // namespace kestrel
