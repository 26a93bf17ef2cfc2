// Per-head transforms shared by the CPU backend's rope/hadamard ops and by attention's sink
// queries (portable code, no intrinsics): RoPE by a position, and the orthonormal Walsh-Hadamard
// transform.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/backend.h"

namespace kestrel::cpu {

// inv_freq[i] = base^(-2i / n_rot), divided by the per-frequency factor if any; i < n_rot / 2.
inline void rope_inv_freq(const RopeParams& p, float* inv_freq) {
  for (int i = 0; i < p.n_rot / 2; ++i) {
    float f = std::pow(p.freq_base, -2.0f * float(i) / float(p.n_rot));
    if (p.freq_factors != nullptr) f /= p.freq_factors[i];
    inv_freq[i] = f;
  }
}

// cos/sin of theta_i = position * freq_scale * inv_freq[i], i < n_rot / 2.
inline void rope_angles(float position, const RopeParams& p, const float* inv_freq, float* cos_theta,
                        float* sin_theta) {
  const float scaled = position * p.freq_scale;
  for (int i = 0; i < p.n_rot / 2; ++i) {
    const float theta = scaled * inv_freq[i];
    cos_theta[i] = std::cos(theta);
    sin_theta[i] = std::sin(theta);
  }
}

// Rotates the pairs of one head by the angles: (i, i + n_rot/2) in NeoX order, (2i, 2i + 1)
// otherwise.
inline void rope_apply(float* head, const RopeParams& p, const float* cos_theta, const float* sin_theta) {
  const int half = p.n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const int a = p.neox ? i : 2 * i;
    const int b = p.neox ? i + half : 2 * i + 1;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * cos_theta[i] - x1 * sin_theta[i];
    head[b] = x0 * sin_theta[i] + x1 * cos_theta[i];
  }
}

// x = H x / sqrt(n) for n a power of two (H the Sylvester-Hadamard matrix): orthonormal and
// symmetric, so applying it twice gives x back (up to rounding).
inline void hadamard_head(float* x, int n) {
  for (int len = 1; len < n; len <<= 1) {
    for (int i = 0; i < n; i += 2 * len) {
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
  const float norm = 1.0f / std::sqrt(float(n));
  for (int i = 0; i < n; ++i) x[i] *= norm;
}

}  // namespace kestrel::cpu
