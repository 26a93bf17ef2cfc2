// A hook on the forward pass that sees the F32 input of every linear layer, before the backend
// converts it to the weight format's activation type: what an importance matrix (llama.cpp's
// imatrix), GPTQ's Hessians and AWQ's activation scales are computed from.
#pragma once

#include <cstdint>
#include <string>

namespace kestrel {

// The linear layers of a decoder layer, plus the output head (layer -1; TiedOutput when the head is
// the token embedding, named after it: "token_embd.weight"). A Mixture-of-Experts
// layer has, instead of FfnGate/Up/Down, its router, its routed experts' stacks (ExpertGate/Up/Down,
// seen expert by expert through observe_stacked) and, in some architectures, shared experts with an
// optional sigmoid gate. Latent attention (DeepSeek-V2) has, instead of AttnK/AttnV, the query
// latent's two matrices (AttnQA, AttnQB; or AttnQ), the latent key's (AttnKvA) and the per-head
// stacks that absorb q_nope (AttnKB) and expand the attended latents (AttnVB), seen head by head.
enum class LinearKind {
  AttnQ, AttnK, AttnV, AttnOutput, FfnGate, FfnUp, FfnDown, Output,
  Router, ExpertGate, ExpertUp, ExpertDown, SharedGate, SharedUp, SharedDown, SharedGateInp,
  AttnQA, AttnQB, AttnKvA, AttnKB, AttnVB, TiedOutput
};
// A dense layer's seven matrices (the kinds up to Output, without it).
inline constexpr LinearKind kLayerLinearKinds[] = {
    LinearKind::AttnQ,   LinearKind::AttnK, LinearKind::AttnV,  LinearKind::AttnOutput,
    LinearKind::FfnGate, LinearKind::FfnUp, LinearKind::FfnDown};

// The GGUF (llama.cpp) name of the weight: "blk.3.attn_q.weight", "output.weight", "token_embd.weight".
std::string linear_tensor_name(int64_t layer, LinearKind kind);

class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  // x is [n][cols], row-major: n tokens of the layer's input. Called on the forward pass's
  // thread, in layer order; x is only valid during the call. It comes before the layer's matrix
  // is read: the observer may point the model at another encoding of it (Model::replace_matrix),
  // and the forward pass then computes with that one (GPTQ's layer-by-layer quantization).
  virtual void observe(int64_t layer, LinearKind kind, const float* x, int64_t n, int64_t cols) = 0;
  // The input of matrix `index` of a 3-D stack of n_mat: a routed expert of a MoE layer (kind
  // ExpertGate, ExpertUp or ExpertDown; x holds the rows of the n tokens routed to it, in token
  // order; experts no token chose are not shown) or an attention head's matrix of latent attention
  // (AttnKB, AttnVB; all n tokens). x is [n][cols]. An observer that cannot use per-matrix inputs
  // refuses (the default; the calibration pass refuses such models for those before any work).
  virtual void observe_stacked(int64_t layer, LinearKind kind, int64_t index, int64_t n_mat, const float* x,
                               int64_t n, int64_t cols);
  // After the last observe_stacked of a stack (every routed expert, or every head, shown): the
  // forward pass reads the stack only after this call, so an observer may replace the whole stack
  // here (GPTQ's expert by expert, head by head encoding).
  virtual void end_stacked(int64_t /*layer*/, LinearKind /*kind*/, int64_t /*n_mat*/) {}
};

// Thrown by an observer to end a forward pass at the input it was shown (a calibration that runs
// each layer only as far as the matrices it is learning from): the pass's hidden state, scratch
// and K/V writes are then partial, and whoever set the observer catches it.
struct ForwardPassStopped {};

// Who sees a block's matrix inputs, and as which layer (none: nobody).
struct LayerObserver {
  ActivationObserver* observer = nullptr;
  int64_t layer = 0;
  void observe(LinearKind kind, const float* x, int64_t n, int64_t cols) const {
    if (observer) observer->observe(layer, kind, x, n, cols);
  }
  void observe_stacked(LinearKind kind, int64_t index, int64_t n_mat, const float* x, int64_t n, int64_t cols) const {
    if (observer) observer->observe_stacked(layer, kind, index, n_mat, x, n, cols);
  }
  void end_stacked(LinearKind kind, int64_t n_mat) const {
    if (observer) observer->end_stacked(layer, kind, n_mat);
  }
};

}  // namespace kestrel
