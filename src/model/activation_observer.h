// A hook on the forward pass that sees the F32 input of every linear layer, before the backend
// converts it to the weight format's activation type: what an importance matrix (llama.cpp's
// imatrix), GPTQ's Hessians and AWQ's activation scales are computed from.
#pragma once

#include <cstdint>
#include <string>

namespace kestrel {

// The linear layers of a decoder layer, plus the output head (layer -1).
enum class LinearKind { AttnQ, AttnK, AttnV, AttnOutput, FfnGate, FfnUp, FfnDown, Output };
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
};

}  // namespace kestrel
