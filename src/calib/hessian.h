// Accumulates a linear layer's GPTQ Hessian H = 2/n sum_t x_t x_t^T over its calibration inputs
// x_t (rows of [n][cols]). The sum is kept in double; each call's product X^T X is computed in
// float tiles of 256 x 256 (only the lower triangle's tiles, shared out over the pool's threads)
// over slices of at most 4096 tokens, each slice's tile added into the double sum.
#pragma once

#include <cstdint>

#include "calib/gptq.h"
#include "core/thread_pool.h"

namespace kestrel::calib {

class HessianAccumulator {
 public:
  explicit HessianAccumulator(int64_t cols);
  // x: [n][cols], row-major. Throws on a non-finite input (naming nothing: the caller knows the layer).
  void add(const float* x, int64_t n, ThreadPool& pool);
  int64_t samples() const { return samples_; }
  // 2/n times the sum, both triangles filled.
  Hessian hessian() const;

 private:
  int64_t cols_;
  int64_t samples_ = 0;
  std::vector<double> sum_;  // [cols][cols]; only tiles on or below the diagonal are filled
};

}  // namespace kestrel::calib
