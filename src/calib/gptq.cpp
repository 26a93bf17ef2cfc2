#include "calib/gptq.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cstring>
#include <cmath>
#include <numeric>

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/LU>

#include "core/error.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/format.h"

namespace kestrel::calib {
namespace {

using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct FormatGrid {
  int64_t group = 0;
  bool symmetric = false;
};

FormatGrid format_grid(DType type) {
  switch (type) {
    case DType::INT4_SYM_G32: return {32, true};
    case DType::INT4_SYM_G64: return {64, true};
    case DType::INT4_SYM_G128: return {128, true};
    case DType::INT4_ASYM_G32: return {32, false};
    case DType::INT4_ASYM_G64: return {64, false};
    case DType::INT4_ASYM_G128: return {128, false};
    default: fail("GPTQ cannot target {}: it quantizes to INT4_SYM_G32/G64/G128 and INT4_ASYM_G32/G64/G128", dtype_name(type));
  }
}

// One group's grid, chosen and applied exactly as quant/int_formats.cpp's round-to-nearest
// quantizers do (F16 scale and minimum as stored; levels in float, ties to even).
struct GroupGrid {
  uint16_t d16 = 0, m16 = 0;
  float d = 0.0f, m = 0.0f, inverse = 0.0f;
  bool symmetric = false;

  static GroupGrid choose(const float* x, int64_t g, bool symmetric) {
    GroupGrid grid;
    grid.symmetric = symmetric;
    if (symmetric) {
      float extreme = 0.0f;
      for (int64_t i = 0; i < g; ++i) {
        if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
      }
      grid.d16 = float_to_fp16(extreme / -8.0f);
    } else {
      float lo = x[0], hi = x[0];
      for (int64_t i = 1; i < g; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
      grid.d16 = float_to_fp16((hi - lo) / 15.0f);
      grid.m16 = float_to_fp16(lo);
      grid.m = fp16_to_float(grid.m16);
    }
    grid.d = fp16_to_float(grid.d16);
    grid.inverse = grid.d != 0.0f ? 1.0f / grid.d : 0.0f;
    return grid;
  }
  int level(float x) const {
    if (symmetric) return int(std::clamp(std::nearbyint(x * inverse), -8.0f, 7.0f)) + 8;
    return int(std::clamp(std::nearbyint((x - m) * inverse), 0.0f, 15.0f));
  }
  // d * q is exact in float (an F16 times a 4-bit integer), so this is the format's dequantized
  // value whether or not the compiler fuses the add.
  float value(int level) const { return symmetric ? d * float(level - 8) : d * float(level) + m; }
};

// Writes one row's groups: levels [cols] (0..15), grids [cols / g].
void encode_row(DType type, const FormatGrid& f, const uint8_t* levels, const GroupGrid* grids, int64_t cols,
                uint8_t* out) {
  const int64_t g = f.group;
  const int64_t block_bytes = quant::require_format(type).block_bytes;
  for (int64_t b = 0; b < cols / g; ++b) {
    uint8_t* block = out + b * block_bytes;
    uint8_t* qs;
    if (f.symmetric) {
      std::memcpy(block, &grids[b].d16, 2);
      qs = block + 2;
    } else {
      std::memcpy(block, &grids[b].d16, 2);
      std::memcpy(block + 2, &grids[b].m16, 2);
      qs = block + 4;
    }
    // Byte l: element l in the low nibble, element l + g/2 in the high one (quant/blocks.h).
    const uint8_t* lv = levels + b * g;
    for (int64_t l = 0; l < g / 2; ++l) qs[l] = uint8_t(lv[l] | lv[l + g / 2] << 4);
  }
}

// sum_r e_r^T H e_r over the rows of e [rows][cols].
double proxy_loss(const RowMajorD& e, const Eigen::Map<const RowMajorD>& h) {
  return (e * h).cwiseProduct(e).sum();
}

// u = the upper triangular U with U^T U = (h + lambda I)^-1, or false if h + lambda I is not
// positive definite. Without forming the inverse: with J the order-reversing permutation and
// J (h + lambda I) J = L L^T, U = J L^-1 J (then U^-1 U^-T = J L L^T J = h + lambda I). L^-1 is
// solved a block of columns at a time on the pool; column block [c0, c1) of L^-1 is zero above
// row c0, so only L's trailing part takes part.
bool upper_cholesky_of_inverse(const Eigen::MatrixXd& h, double lambda, ThreadPool& pool, RowMajorD& u) {
  const int64_t n = h.rows();
  Eigen::MatrixXd reversed = h.reverse();
  reversed.diagonal().array() += lambda;
  const Eigen::LLT<Eigen::MatrixXd> llt(reversed);
  if (llt.info() != Eigen::Success) return false;
  const Eigen::MatrixXd l = llt.matrixL();
  Eigen::MatrixXd l_inv = Eigen::MatrixXd::Zero(n, n);
  constexpr int64_t kColumns = 64;
  const int64_t blocks = (n + kColumns - 1) / kColumns;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    for (int64_t b = next++; b < blocks; b = next++) {
      const int64_t c0 = b * kColumns, w = std::min(kColumns, n - c0);
      auto x = l_inv.block(c0, c0, n - c0, w);
      x.topRows(w).setIdentity();
      l.bottomRightCorner(n - c0, n - c0).triangularView<Eigen::Lower>().solveInPlace(x);
    }
  });
  if (!l_inv.allFinite()) return false;
  u = l_inv.reverse();
  return true;
}

}  // namespace

bool gptq_supports(DType type) {
  switch (type) {
    case DType::INT4_SYM_G32: case DType::INT4_SYM_G64: case DType::INT4_SYM_G128:
    case DType::INT4_ASYM_G32: case DType::INT4_ASYM_G64: case DType::INT4_ASYM_G128: return true;
    default: return false;
  }
}

std::vector<uint8_t> gptq_quantize(DType type, std::span<const float> w, int64_t rows, int64_t cols,
                                   const Hessian& hessian, const GptqOptions& o, ThreadPool& pool,
                                   GptqStats* stats, bool measure_proxy_loss) {
  const FormatGrid f = format_grid(type);
  const int64_t g = f.group;
  if (cols % g != 0) fail("GPTQ to {}: {} columns are not a multiple of the group of {}", dtype_name(type), cols, g);
  if (int64_t(w.size()) != rows * cols) fail("internal: GPTQ weights of {} values for {} x {}", w.size(), rows, cols);
  if (hessian.cols != cols || int64_t(hessian.h.size()) != cols * cols) {
    fail("internal: GPTQ Hessian of {} columns for a matrix of {}", hessian.cols, cols);
  }
  if (o.block_size <= 0 || o.block_size % g != 0) {
    fail("GPTQ block size {} is not a multiple of the group of {}", o.block_size, g);
  }
  GptqStats local;
  GptqStats& st = stats ? *stats : local;
  st = GptqStats{};

  const Eigen::Map<const RowMajorD> h_in(hessian.h.data(), cols, cols);
  Eigen::MatrixXd h = h_in;
  std::vector<float> w0(w.begin(), w.end());  // the weights with dead columns zeroed
  for (int64_t c = 0; c < cols; ++c) {
    if (h(c, c) == 0.0) {
      h(c, c) = 1.0;
      for (int64_t r = 0; r < rows; ++r) w0[size_t(r * cols + c)] = 0.0f;
      ++st.dead_columns;
    }
  }
  const int64_t groups = cols / g;
  // Static grids (act_order) from the unquantized weights; otherwise filled as groups come up.
  std::vector<GroupGrid> grids(static_cast<size_t>(rows * groups));
  if (o.act_order) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < groups; ++b) {
        grids[size_t(r * groups + b)] = GroupGrid::choose(w0.data() + r * cols + b * g, g, f.symmetric);
      }
    }
  }
  // perm[i]: the original column processed i-th (decreasing diagonal, ties in column order).
  std::vector<int64_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  if (o.act_order) {
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return h(a, a) > h(b, b); });
  }
  Eigen::MatrixXd hp(cols, cols);
  for (int64_t i = 0; i < cols; ++i) {
    for (int64_t j = 0; j < cols; ++j) hp(i, j) = h(perm[size_t(i)], perm[size_t(j)]);
  }

  // U: the upper Cholesky factor of (H + lambda I)^-1, dampening raised while H is not positive
  // definite.
  const double mean_diag = hp.diagonal().mean();
  RowMajorD u;
  for (double damp = o.damp_percent;; damp *= 10.0) {
    if (upper_cholesky_of_inverse(hp, damp * mean_diag, pool, u)) {
      st.damp_used = damp;
      break;
    }
    if (damp > o.damp_percent * 999.0) {
      fail("GPTQ: the Hessian ({} x {}) is not positive definite even with dampening {}", cols, cols, damp);
    }
  }

  const int64_t row_bytes = quant::row_bytes(quant::require_format(type), cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes));
  std::vector<uint8_t> levels(static_cast<size_t>(rows * cols));
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    const int64_t n = r1 - r0;
    RowMajorD wp(n, cols);  // this thread's rows, columns in processing order
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < cols; ++i) wp(r, i) = w0[size_t((r0 + r) * cols + perm[size_t(i)])];
    }
    RowMajorD err(n, o.block_size);
    std::vector<float> group_values(static_cast<size_t>(g));
    for (int64_t i1 = 0; i1 < cols; i1 += o.block_size) {
      const int64_t i2 = std::min(cols, i1 + o.block_size);
      for (int64_t i = i1; i < i2; ++i) {
        const int64_t col = perm[size_t(i)];
        const double d = u(i, i);
        for (int64_t r = 0; r < n; ++r) {
          GroupGrid& grid = grids[size_t((r0 + r) * groups + col / g)];
          if (!o.act_order && i % g == 0) {
            // The group's columns are i..i+g-1 (no permutation), all inside this lazy batch.
            for (int64_t k = 0; k < g; ++k) group_values[size_t(k)] = float(wp(r, i + k));
            grid = GroupGrid::choose(group_values.data(), g, f.symmetric);
          }
          const double wv = wp(r, i);
          const int level = grid.level(float(wv));
          levels[size_t((r0 + r) * cols + col)] = uint8_t(level);
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
      encode_row(type, f, levels.data() + r * cols, grids.data() + r * groups, cols, out.data() + r * row_bytes);
    }
  });

  if (measure_proxy_loss) {
    const quant::WeightFormat& format = quant::require_format(type);
    std::mutex mutex;
    pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      RowMajorD e(r1 - r0, cols), e_rtn(r1 - r0, cols);
      std::vector<float> deq(static_cast<size_t>(cols));
      std::vector<uint8_t> rtn(static_cast<size_t>(row_bytes));
      for (int64_t r = r0; r < r1; ++r) {
        const float* wr = w.data() + r * cols;
        format.dequantize_row(out.data() + r * row_bytes, deq.data(), cols);
        for (int64_t c = 0; c < cols; ++c) e(r - r0, c) = double(wr[c]) - double(deq[size_t(c)]);
        format.quantize_row(wr, rtn.data(), cols);
        format.dequantize_row(rtn.data(), deq.data(), cols);
        for (int64_t c = 0; c < cols; ++c) e_rtn(r - r0, c) = double(wr[c]) - double(deq[size_t(c)]);
      }
      const double loss = proxy_loss(e, h_in), loss_rtn = proxy_loss(e_rtn, h_in);
      const std::lock_guard lock(mutex);
      st.proxy_loss += loss;
      st.proxy_loss_rtn += loss_rtn;
    });
  }
  return out;
}

}  // namespace kestrel::calib
