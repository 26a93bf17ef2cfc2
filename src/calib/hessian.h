// Accumulates a linear layer's GPTQ Hessian H = 2/n sum_t x_t x_t^T over its calibration inputs
// x_t (rows of [n][cols]). The sum is kept in double; the product X^T X is computed in float
// tiles of 256 x 256 (only the lower triangle's tiles, shared out over the pool's threads) over
// consecutive slices of 4096 tokens, each slice's tile added into the double sum. The slices are
// cut from the stream of rows, not from the calls: rows short of a slice wait (up to 4095 x cols
// floats) for the next call or hessian(), so a Hessian is bitwise the same however its rows are
// split between calls (a calibration run in slices of chunks equals one run over all of them).
#pragma once

#include <cstdint>

#include "calib/gptq.h"
#include "calib/row_slices.h"
#include "core/thread_pool.h"

namespace kestrel::calib {

class HessianAccumulator {
 public:
  explicit HessianAccumulator(int64_t cols);
  // x: [n][cols], row-major. Throws on a non-finite input (naming nothing: the caller knows the layer).
  void add(const float* x, int64_t n, ThreadPool& pool);
  int64_t samples() const { return samples_; }
  // 2/n times the sum, both triangles filled (the waiting rows added first). Spends the
  // accumulator: its sum's memory becomes the Hessian's.
  Hessian hessian(ThreadPool& pool);

 private:
  // Adds X^T X of rows x [rows][cols] (at most one slice) into the double sum.
  void add_slice(const float* x, int64_t rows, ThreadPool& pool);

  int64_t cols_;
  int64_t samples_ = 0;
  std::vector<double> sum_;     // [cols][cols]; only tiles on or below the diagonal are filled
  RowSlicer slicer_;            // 4096-token slices
};

}  // namespace kestrel::calib
