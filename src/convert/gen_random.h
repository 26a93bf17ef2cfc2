// Random numbers for synthetic weights: xoshiro256+ seeded through splitmix64, normals by
// Box-Muller. Each block of a tensor gets its own generator from (seed, tensor, block), so the
// file does not depend on the number of threads.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace kestrel {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class Xoshiro256 {
 public:
  Xoshiro256(uint64_t seed, uint64_t stream, uint64_t block) {
    uint64_t s = seed;
    s = splitmix64(s) ^ stream;
    s = splitmix64(s) ^ block;
    for (uint64_t& word : state_) word = splitmix64(s);
  }

  uint64_t next() {
    const uint64_t result = state_[0] + state_[3];
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = (state_[3] << 45) | (state_[3] >> 19);
    return result;
  }

  // Fills out[0..n) with normal values of the given std (mean 0).
  void fill_normal(float* out, int64_t n, float std) {
    constexpr float kTwoPi = 2.0f * std::numbers::pi_v<float>;
    constexpr float kScale = 1.0f / 16777216.0f;  // 2^-24
    int64_t i = 0;
    while (i < n) {
      const uint64_t bits = next();
      // Two 24-bit uniforms: u1 in (0, 1] (log is finite), u2 in [0, 1).
      const float u1 = float((bits >> 40) + 1) * kScale;
      const float u2 = float((bits >> 8) & 0xffffff) * kScale;
      const float r = std * std::sqrt(-2.0f * std::log(u1));
      const float angle = kTwoPi * u2;
      out[i++] = r * std::cos(angle);
      if (i < n) out[i++] = r * std::sin(angle);
    }
  }

 private:
  uint64_t state_[4];
};

}  // namespace kestrel
