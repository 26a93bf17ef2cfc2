// The small random layers of the calibrated quantizers' reference scripts
// (scripts/gen_gptq_reference.py, reused by gen_awq_reference.py), op for op: Knuth's MMIX LCG,
// weights with outliers, inputs with channel scales (some 8x) and neighbour correlations.
#pragma once

#include <cstdint>
#include <vector>

namespace kestrel::test {

struct Lcg {
  uint64_t state;
  double uniform() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return double(state >> 11) * (1.0 / 9007199254740992.0);
  }
  double bell() { return (uniform() + uniform() + uniform() - 1.5) * 2.0; }
};

struct CalibLayer {
  int64_t rows, cols, tokens;
  std::vector<float> w;  // [rows][cols]
  std::vector<float> x;  // [tokens][cols]
};

inline CalibLayer make_calib_layer(uint64_t seed, int64_t rows, int64_t cols, int64_t tokens,
                                   const std::vector<int64_t>& dead) {
  Lcg g{seed};
  CalibLayer l{rows, cols, tokens, std::vector<float>(size_t(rows * cols)), std::vector<float>(size_t(tokens * cols))};
  for (int64_t i = 0; i < rows * cols; ++i) l.w[size_t(i)] = float(g.bell() * 0.05);
  for (int64_t r = 0; r < rows; r += 5) l.w[size_t(r * cols + (r * 7) % cols)] = 0.4f;
  std::vector<double> z(static_cast<size_t>(tokens * (cols + 3)));
  for (double& v : z) v = g.bell();
  for (int64_t t = 0; t < tokens; ++t) {
    const double* zt = z.data() + t * (cols + 3);
    for (int64_t c = 0; c < cols; ++c) {
      const double scale = c % 11 == 3 ? 8.0 : 1.0 + double(c % 5) * 0.25;
      l.x[size_t(t * cols + c)] = float(scale * (zt[c + 1] + 0.6 * zt[c] - 0.3 * zt[c + 3]));
    }
    for (int64_t c : dead) l.x[size_t(t * cols + c)] = 0.0f;
  }
  return l;
}

}  // namespace kestrel::test
