#include "calib/cholesky.h"

#include <algorithm>
#include <atomic>

#include <Eigen/Cholesky>

namespace kestrel::calib {

namespace {

// body(i) for i in [0, count) on the pool, the next index to whichever thread is free.
template <typename Body>
void each_on_pool(ThreadPool& pool, int64_t count, const Body& body) {
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    for (int64_t i = next++; i < count; i = next++) body(i);
  });
}

}  // namespace

bool cholesky_lower_in_place(Eigen::MatrixXd& a, ThreadPool& pool, int64_t block) {
  const int64_t n = a.rows();
  for (int64_t k0 = 0; k0 < n; k0 += block) {
    const int64_t w = std::min(block, n - k0), rest = n - k0 - w;
    Eigen::Ref<Eigen::MatrixXd> a11 = a.block(k0, k0, w, w);
    const Eigen::LLT<Eigen::Ref<Eigen::MatrixXd>> llt(a11);  // factors a11's lower triangle in place
    if (llt.info() != Eigen::Success) return false;
    if (rest == 0) break;
    // The panel below: A21 <- A21 L11^-T, in row blocks.
    const int64_t row_blocks = (rest + block - 1) / block;
    each_on_pool(pool, row_blocks, [&](int64_t b) {
      const int64_t r0 = k0 + w + b * block, h = std::min(block, n - r0);
      auto panel = a.block(r0, k0, h, w);
      a11.transpose().triangularView<Eigen::Upper>().solveInPlace<Eigen::OnTheRight>(panel);
    });
    // The trailing lower triangle: A22 -= A21 A21^T, by column blocks (each from its diagonal down).
    const auto a21 = a.block(k0 + w, k0, rest, w);
    each_on_pool(pool, row_blocks, [&](int64_t b) {
      const int64_t c0 = b * block, cw = std::min(block, rest - c0);
      a.block(k0 + w + c0, k0 + w + c0, rest - c0, cw).noalias() -=
          a21.middleRows(c0, rest - c0) * a21.middleRows(c0, cw).transpose();
    });
  }
  return true;
}

void lower_triangular_inverse(const Eigen::MatrixXd& l, Eigen::MatrixXd& x, ThreadPool& pool, int64_t block) {
  const int64_t n = l.rows();
  x.setZero(n, n);
  const int64_t blocks = (n + block - 1) / block;
  // The widest block columns (the leftmost) first, so the last ones to finish are short.
  each_on_pool(pool, blocks, [&](int64_t j) {
    const int64_t c0 = j * block, w = std::min(block, n - c0);
    auto xjj = x.block(c0, c0, w, w);
    xjj.setIdentity();
    l.block(c0, c0, w, w).triangularView<Eigen::Lower>().solveInPlace(xjj);
    for (int64_t r0 = c0 + w; r0 < n; r0 += block) {
      const int64_t h = std::min(block, n - r0);
      auto xij = x.block(r0, c0, h, w);
      xij.noalias() = -l.block(r0, c0, h, r0 - c0) * x.block(c0, c0, r0 - c0, w);
      l.block(r0, r0, h, h).triangularView<Eigen::Lower>().solveInPlace(xij);
    }
  });
}

}  // namespace kestrel::calib
