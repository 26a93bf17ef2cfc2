#include "calib/gptq.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <span>

#include <Eigen/Core>

#include "calib/cholesky.h"
#include "calib/grid_format.h"
#include "core/error.h"
#include "quant/format.h"

namespace kestrel::calib {
namespace {

using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// sum_r e_r^T H e_r over the rows of e [rows][cols].
double proxy_loss(const RowMajorD& e, const Eigen::Map<const RowMajorD>& h) {
  return (e * h).cwiseProduct(e).sum();
}

// u = the upper triangular U with U^T U = (H + lambda I)^-1 for H = h with its rows and columns
// taken in the processing `order` and its diagonal replaced by `diagonal` (h's, with a dead
// column's zero taken as 1), or false if H + lambda I is not positive definite. Without forming the inverse: with J the order-reversing
// permutation and J (H + lambda I) J = L L^T, U = J L^-1 J (then U^-1 U^-T = J L L^T J = H + lambda I).
// Three n x n matrices at most (the Hessian, the factor, its inverse): the 8960-wide Hessian
// of a 1.5B model's ffn_down is 642 MB in double.
bool upper_cholesky_of_inverse(const Eigen::Map<const RowMajorD>& h, std::span<const double> diagonal,
                               std::span<const int64_t> order, double lambda, ThreadPool& pool, RowMajorD& u) {
  const int64_t n = h.rows();
  Eigen::MatrixXd a(n, n);  // J H J + lambda I, lower triangle
  pool.parallel_for(n, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t cj = order[size_t(n - 1 - j)];
      a(j, j) = diagonal[size_t(cj)] + lambda;
      for (int64_t i = j + 1; i < n; ++i) a(i, j) = h(cj, order[size_t(n - 1 - i)]);  // row cj: contiguous
    }
  });
  if (!cholesky_lower_in_place(a, pool)) return false;
  Eigen::MatrixXd l_inv;
  lower_triangular_inverse(a, l_inv, pool);
  a = Eigen::MatrixXd();
  if (!l_inv.allFinite()) return false;
  u = l_inv.reverse();
  return true;
}

}  // namespace

bool gptq_supports(DType type) { return GridFormat::supports(type); }

double default_gptq_damp(int64_t calibration_tokens, int64_t widest_columns) {
  return calibration_tokens >= 4 * widest_columns ? 0.01 : 0.1;
}

std::vector<uint8_t> gptq_quantize(DType type, std::span<const float> w, int64_t rows, int64_t cols,
                                   const Hessian& hessian, const GptqOptions& o, ThreadPool& pool,
                                   GptqStats* stats, bool measure_proxy_loss) {
  const GridFormat& f = GridFormat::of(type);
  const int64_t bv = f.block_values(), gv = f.group_values();
  if (cols % bv != 0) fail("GPTQ to {}: {} columns are not a multiple of its blocks of {}", dtype_name(type), cols, bv);
  if (int64_t(w.size()) != rows * cols) fail("internal: GPTQ weights of {} values for {} x {}", w.size(), rows, cols);
  if (hessian.cols != cols || int64_t(hessian.h.size()) != cols * cols) {
    fail("internal: GPTQ Hessian of {} columns for a matrix of {}", hessian.cols, cols);
  }
  // Lazy batches hold whole blocks, so a block's grids can be chosen when its first column comes up.
  const int64_t lazy = std::max(o.block_size, bv);
  if (o.block_size <= 0 || lazy % bv != 0) {
    fail("GPTQ block size {} is not a multiple of {}'s blocks of {}", o.block_size, dtype_name(type), bv);
  }
  GptqStats local;
  GptqStats& st = stats ? *stats : local;
  st = GptqStats{};

  const Eigen::Map<const RowMajorD> h_in(hessian.h.data(), cols, cols);
  std::vector<float> w0(w.begin(), w.end());  // the weights with dead columns zeroed
  std::vector<double> diagonal(static_cast<size_t>(cols));  // H's, a dead column's taken as 1
  for (int64_t c = 0; c < cols; ++c) {
    diagonal[size_t(c)] = h_in(c, c);
    if (h_in(c, c) == 0.0) {
      diagonal[size_t(c)] = 1.0;
      for (int64_t r = 0; r < rows; ++r) w0[size_t(r * cols + c)] = 0.0f;
      ++st.dead_columns;
    }
  }
  // The importance of each column for formats whose quantizer weighs its error (k-quants): the mean
  // squared input, i.e. the imatrix, which is half the Hessian's diagonal.
  std::vector<float> importance(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) importance[size_t(c)] = float(h_in(c, c) / 2.0);
  const int64_t blocks = cols / bv, groups = cols / gv, block_bytes = f.block_bytes();
  const int64_t row_bytes = quant::row_bytes(quant::require_format(type), cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes));
  // Grids: chosen up front from the unquantized weights (act_order: static groups), or as each
  // block's first column comes up.
  std::vector<AffineGrid> grids(static_cast<size_t>(rows * groups));
  if (o.act_order) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        f.choose(w0.data() + r * cols + b * bv, importance.data() + b * bv, out.data() + r * row_bytes + b * block_bytes,
                 grids.data() + r * groups + b * (bv / gv));
      }
    }
  }
  // perm[i]: the original column processed i-th (decreasing diagonal, ties in column order).
  std::vector<int64_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  if (o.act_order) {
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return diagonal[size_t(a)] > diagonal[size_t(b)]; });
  }

  // U: the upper Cholesky factor of (H + lambda I)^-1 in the processing order, dampening raised
  // while H is not positive definite.
  const double mean_diag = std::accumulate(diagonal.begin(), diagonal.end(), 0.0) / double(cols);
  RowMajorD u;
  for (double damp = o.damp_percent;; damp *= 10.0) {
    if (upper_cholesky_of_inverse(h_in, diagonal, perm, damp * mean_diag, pool, u)) {
      st.damp_used = damp;
      break;
    }
    if (damp > o.damp_percent * 999.0) {
      fail("GPTQ: the Hessian ({} x {}) is not positive definite even with dampening {}", cols, cols, damp);
    }
  }

  std::vector<uint8_t> levels(static_cast<size_t>(rows * cols));
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    const int64_t n = r1 - r0;
    RowMajorD wp(n, cols);  // this thread's rows, columns in processing order
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < cols; ++i) wp(r, i) = w0[size_t((r0 + r) * cols + perm[size_t(i)])];
    }
    RowMajorD err(n, lazy);
    std::vector<float> block_values(static_cast<size_t>(bv));
    for (int64_t i1 = 0; i1 < cols; i1 += lazy) {
      const int64_t i2 = std::min(cols, i1 + lazy);
      for (int64_t i = i1; i < i2; ++i) {
        const int64_t col = perm[size_t(i)];
        const double d = u(i, i);
        for (int64_t r = 0; r < n; ++r) {
          const int64_t row = r0 + r;
          if (!o.act_order && i % bv == 0) {
            // The block's columns are i..i+bv-1 (no permutation), all inside this lazy batch.
            for (int64_t k = 0; k < bv; ++k) block_values[size_t(k)] = float(wp(r, i + k));
            f.choose(block_values.data(), importance.data() + i, out.data() + row * row_bytes + (i / bv) * block_bytes,
                     grids.data() + row * groups + (i / bv) * (bv / gv));
          }
          const AffineGrid& grid = grids[size_t(row * groups + col / gv)];
          const double wv = wp(r, i);
          const int level = grid.level(float(wv));
          levels[size_t(row * cols + col)] = uint8_t(level);
          const double e = (wv - double(grid.value(level))) / d;
          err(r, i - i1) = e;
          // The rest of the batch absorbs this column's error now; later batches all at once.
          if (i + 1 < i2) wp.row(r).segment(i + 1, i2 - i - 1) -= e * u.row(i).segment(i + 1, i2 - i - 1);
        }
      }
      if (i2 < cols) {
        wp.rightCols(cols - i2).noalias() -= err.leftCols(i2 - i1) * u.block(i1, i2, i2 - i1, cols - i2);
      }
    }
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        f.set_levels(out.data() + r * row_bytes + b * block_bytes, levels.data() + r * cols + b * bv);
      }
    }
  });

  if (measure_proxy_loss) {
    const quant::WeightFormat& format = quant::require_format(type);
    std::vector<uint8_t> baseline(out.size());
    std::mutex mutex;
    pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      RowMajorD e(r1 - r0, cols), e_base(r1 - r0, cols);
      std::vector<float> deq(static_cast<size_t>(cols));
      for (int64_t r = r0; r < r1; ++r) {
        const float* wr = w.data() + r * cols;
        format.dequantize_row(out.data() + r * row_bytes, deq.data(), cols);
        for (int64_t c = 0; c < cols; ++c) e(r - r0, c) = double(wr[c]) - double(deq[size_t(c)]);
        uint8_t* base = baseline.data() + r * row_bytes;
        quant::quantize_row_with_importance(format, wr, base, cols, importance.data());
        format.dequantize_row(base, deq.data(), cols);
        for (int64_t c = 0; c < cols; ++c) e_base(r - r0, c) = double(wr[c]) - double(deq[size_t(c)]);
      }
      const double loss = proxy_loss(e, h_in), loss_base = proxy_loss(e_base, h_in);
      const std::lock_guard lock(mutex);
      st.proxy_loss += loss;
      st.proxy_loss_baseline += loss_base;
    });
    if (o.keep_better && st.proxy_loss_baseline < st.proxy_loss) {
      st.kept_baseline = true;
      return baseline;
    }
  }
  return out;
}

}  // namespace kestrel::calib
