#include "calib/hessian.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "core/error.h"

namespace kestrel::calib {
namespace {

constexpr int64_t kTile = 256;         // columns per tile of the product
constexpr int64_t kSliceTokens = 4096;  // tokens per float product before it is added in double

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace

HessianAccumulator::HessianAccumulator(int64_t cols)
    : cols_(cols), sum_(size_t(cols * cols), 0.0), slicer_(cols, kSliceTokens) {
  if (cols <= 0) fail("internal: Hessian of {} columns", cols);
}

void HessianAccumulator::add(const float* x, int64_t n, ThreadPool& pool) {
  if (n <= 0) return;
  if (sum_.empty()) fail("internal: rows added to a spent Hessian accumulator");
  for (int64_t i = 0; i < n * cols_; ++i) {
    if (!std::isfinite(x[i])) fail("non-finite calibration activation (token {}, channel {})", i / cols_, i % cols_);
  }
  samples_ += n;
  slicer_.add(x, n, [&](const float* rows, int64_t count) { add_slice(rows, count, pool); });
}

void HessianAccumulator::add_slice(const float* x, int64_t rows, ThreadPool& pool) {
  // The tile pairs (i, j) with j <= i: the lower triangle, shared out over the threads.
  const int64_t tiles = (cols_ + kTile - 1) / kTile;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t i = 0; i < tiles; ++i) {
    for (int64_t j = 0; j <= i; ++j) pairs.emplace_back(i, j);
  }
  const Eigen::Map<const RowMajorF> X(x, rows, cols_);
  pool.parallel_for(int64_t(pairs.size()), [&](int64_t begin, int64_t end) {
    Eigen::MatrixXf product;
    for (int64_t p = begin; p < end; ++p) {
      const auto [i, j] = pairs[size_t(p)];
      const int64_t ci = i * kTile, cj = j * kTile;
      const int64_t wi = std::min(kTile, cols_ - ci), wj = std::min(kTile, cols_ - cj);
      product.noalias() = X.middleCols(ci, wi).transpose() * X.middleCols(cj, wj);
      for (int64_t a = 0; a < wi; ++a) {
        double* out = sum_.data() + (ci + a) * cols_ + cj;
        for (int64_t b = 0; b < wj; ++b) out[b] += double(product(a, b));
      }
    }
  });
}

Hessian HessianAccumulator::hessian(ThreadPool& pool) {
  if (sum_.empty()) fail("internal: a Hessian accumulator asked twice");
  slicer_.flush([&](const float* rows, int64_t count) { add_slice(rows, count, pool); });
  // The sum becomes the Hessian in place (it is n x n doubles: 642 MB for an 8960-wide input).
  Hessian h;
  h.cols = cols_;
  h.samples = samples_;
  h.h = std::move(sum_);
  sum_.clear();
  if (samples_ == 0) {
    std::fill(h.h.begin(), h.h.end(), 0.0);
    return h;
  }
  const double scale = 2.0 / double(samples_);
  for (int64_t r = 0; r < cols_; ++r) {
    for (int64_t c = 0; c <= r; ++c) {
      // (r, c) with c <= r lies in a tile pair (tile of r, tile of c) on or below the diagonal.
      const double v = h.h[size_t(r * cols_ + c)] * scale;
      h.h[size_t(r * cols_ + c)] = v;
      h.h[size_t(c * cols_ + r)] = v;
    }
  }
  return h;
}

}  // namespace kestrel::calib
