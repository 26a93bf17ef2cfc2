// Element-wise operations of the CPU backend that some architectures need (Gemma's GELU-tanh MLP,
// Starcoder2's plain GELU MLP, Qwen2's biases, Gemma's embedding scale, logit soft-capping). They are cheap next to the
// matrix work, so they stay simple loops on the calling thread.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/attention_kernels.h"

namespace kestrel {

void CpuBackend::gelu_mul(const float* gate, const float* up, int64_t count, float* out) {
  kernels_->activations->gelu_mul(gate, up, count, out);
}

void CpuBackend::activate(GatedActivation act, float* x, int64_t count) {
  if (act == GatedActivation::Silu) {
    for (int64_t i = 0; i < count; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
    return;
  }
  // GELU, tanh approximation (transformers' gelu_pytorch_tanh).
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < count; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  }
}

void CpuBackend::add_row(float* x, const float* row, int64_t n, int64_t width) {
  for (int64_t t = 0; t < n; ++t) {
    float* dst = x + t * width;
    for (int64_t j = 0; j < width; ++j) dst[j] += row[j];
  }
}

void CpuBackend::scale(float* x, float s, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] *= s;
}

void CpuBackend::softcap(float* x, float cap, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

}  // namespace kestrel
