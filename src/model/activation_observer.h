// A hook on the forward pass that sees the F32 input of every linear layer, before the backend
// converts it to the weight format's activation type: what an importance matrix (llama.cpp's
// imatrix), GPTQ's Hessians and AWQ's activation scales are computed from.
#pragma once

#include <cstdint>
#include <string>

namespace kestrel {

// The linear layers of a decoder layer, plus the output head (layer -1). A Mixture-of-Experts
// layer has, instead of FfnGate/Up/Down, its router, its routed experts' stacks (ExpertGate/Up/Down,
// seen expert by expert through observe_expert) and, in some architectures, shared experts with an
// optional sigmoid gate.
enum class LinearKind {
  AttnQ, AttnK, AttnV, AttnOutput, FfnGate, FfnUp, FfnDown, Output,
  Router, ExpertGate, ExpertUp, ExpertDown, SharedGate, SharedUp, SharedDown, SharedGateInp
};
// A layer's seven matrices (every kind but the model's Output).
inline constexpr LinearKind kLayerLinearKinds[] = {
    LinearKind::AttnQ,   LinearKind::AttnK, LinearKind::AttnV,  LinearKind::AttnOutput,
    LinearKind::FfnGate, LinearKind::FfnUp, LinearKind::FfnDown};

// The GGUF (llama.cpp) name of the weight: "blk.3.attn_q.weight", "output.weight".
std::string linear_tensor_name(int64_t layer, LinearKind kind);

class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  // x is [n][cols], row-major: n tokens of the layer's input. Called on the forward pass's
  // thread, in layer order; x is only valid during the call. It comes before the layer's matrix
  // is read: the observer may point the model at another encoding of it (Model::replace_matrix),
  // and the forward pass then computes with that one (GPTQ's layer-by-layer quantization).
  virtual void observe(int64_t layer, LinearKind kind, const float* x, int64_t n, int64_t cols) = 0;
  // The input of one routed expert of a MoE layer (kind ExpertGate, ExpertUp or ExpertDown): x is
  // [n][cols], the rows of the n tokens routed to `expert` of the layer's n_expert, in token
  // order; experts no token chose are not shown. Called after the layer's router was observed.
  // An observer that cannot use per-expert inputs refuses (the default; the calibration pass
  // refuses MoE models for those before any work).
  virtual void observe_expert(int64_t layer, LinearKind kind, int64_t expert, int64_t n_expert, const float* x,
                              int64_t n, int64_t cols);
};

}  // namespace kestrel
