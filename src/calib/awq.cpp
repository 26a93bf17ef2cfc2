#include "calib/awq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "core/error.h"
#include "quant/format.h"

namespace kestrel::calib {
namespace {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr int64_t kRowsPerChunk = 64;

// The group w_mean normalises by: the format's block when it is a real group, else the whole row.
int64_t weight_group(const quant::WeightFormat& f, int64_t cols) {
  return f.block_size >= 32 && f.block_size <= 256 && cols % f.block_size == 0 ? f.block_size : cols;
}

// Q(w diag(s)) diag(s)^-1 of one row of `cols` weights into out; scales empty: Q(w). `scaled` and
// `bytes` are the caller's scratch (cols floats, the row's encoding).
void round_row(const quant::WeightFormat& f, const float* w, int64_t cols, std::span<const float> scales,
               std::span<const float> importance, std::vector<float>& scaled, std::vector<uint8_t>& bytes,
               float* out) {
  for (int64_t k = 0; k < cols; ++k) scaled[size_t(k)] = scales.empty() ? w[k] : w[k] * scales[size_t(k)];
  quant::quantize_row_with_importance(f, scaled.data(), bytes.data(), cols,
                                      importance.empty() ? nullptr : importance.data());
  f.dequantize_row(bytes.data(), out, cols);
  if (!scales.empty()) {
    for (int64_t k = 0; k < cols; ++k) out[k] /= scales[size_t(k)];
  }
}

// Output error || X (Q(W diag(s)) diag(s)^-1 - W)^T ||^2 of one layer; scales empty: s = 1.
double layer_error(const AwqLinear& linear, const AwqInput& in, std::span<const float> scales,
                   std::span<const float> importance, ThreadPool& pool) {
  const quant::WeightFormat& f = quant::require_format(linear.type);
  const int64_t cols = in.cols, chunks = (linear.rows + kRowsPerChunk - 1) / kRowsPerChunk;
  const Eigen::Map<const RowMajorF> x(in.x, in.n, cols);
  std::vector<double> chunk_error(static_cast<size_t>(chunks), 0.0);
  pool.parallel_for(chunks, [&](int64_t c0, int64_t c1) {
    std::vector<float> scaled(static_cast<size_t>(cols)), q(static_cast<size_t>(cols));
    std::vector<uint8_t> bytes(static_cast<size_t>(quant::row_bytes(f, cols)));
    RowMajorF d(kRowsPerChunk, cols);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r0 = c * kRowsPerChunk, m = std::min(kRowsPerChunk, linear.rows - r0);
      for (int64_t i = 0; i < m; ++i) {
        const float* w = linear.w + (r0 + i) * cols;
        round_row(f, w, cols, scales, importance, scaled, bytes, q.data());
        for (int64_t k = 0; k < cols; ++k) d(i, k) = q[size_t(k)] - w[k];
      }
      const RowMajorF e = x * d.topRows(m).transpose();
      chunk_error[size_t(c)] = e.cast<double>().squaredNorm();
    }
  });
  double sum = 0.0;
  for (double e : chunk_error) sum += e;
  return sum;
}

// || Qa(X diag(1/s)) Qw(W diag(s))^T - X W^T ||^2 of one layer: both operands quantized as its
// kernels see them (the activation format's quantizer on each scaled token row).
double quantized_output_error(const AwqLinear& linear, const AwqInput& in, std::span<const float> scales,
                              ThreadPool& pool) {
  const quant::WeightFormat& f = quant::require_format(linear.type);
  const quant::WeightFormat& fa = quant::require_format(f.activation_type);
  const int64_t cols = in.cols, rows = linear.rows;
  RowMajorF xq(in.n, cols);
  pool.parallel_for(in.n, [&](int64_t t0, int64_t t1) {
    std::vector<float> scaled(static_cast<size_t>(cols));
    std::vector<uint8_t> bytes(static_cast<size_t>(quant::row_bytes(fa, cols)));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t c = 0; c < cols; ++c) scaled[size_t(c)] = in.x[t * cols + c] / scales[size_t(c)];
      fa.quantize_row(scaled.data(), bytes.data(), cols);
      fa.dequantize_row(bytes.data(), &xq(t, 0), cols);
    }
  });
  const Eigen::Map<const RowMajorF> x(in.x, in.n, cols);
  const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<double> chunk_error(static_cast<size_t>(chunks), 0.0);
  pool.parallel_for(chunks, [&](int64_t c0, int64_t c1) {
    std::vector<float> scaled(static_cast<size_t>(cols));
    std::vector<uint8_t> bytes(static_cast<size_t>(quant::row_bytes(f, cols)));
    RowMajorF wq(kRowsPerChunk, cols);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r0 = c * kRowsPerChunk, m = std::min(kRowsPerChunk, rows - r0);
      for (int64_t i = 0; i < m; ++i) {
        const float* w = linear.w + (r0 + i) * cols;
        for (int64_t k = 0; k < cols; ++k) scaled[size_t(k)] = w[k] * scales[size_t(k)];
        quant::quantize_row_with_importance(f, scaled.data(), bytes.data(), cols, nullptr);
        f.dequantize_row(bytes.data(), &wq(i, 0), cols);
      }
      const Eigen::Map<const RowMajorF> w(linear.w + r0 * cols, m, cols);
      const RowMajorF e = xq * wq.topRows(m).transpose() - x * w.transpose();
      chunk_error[size_t(c)] = e.cast<double>().squaredNorm();
    }
  });
  double sum = 0.0;
  for (double e : chunk_error) sum += e;
  return sum;
}

// The scaled input's imatrix E[x^2] / s^2 (empty when the input has none).
std::vector<float> scaled_importance(const AwqInput& in, std::span<const float> scales) {
  std::vector<float> importance;
  if (!in.sq_mean.empty()) {
    importance.resize(static_cast<size_t>(in.cols));
    for (int64_t c = 0; c < in.cols; ++c) {
      const float s = scales.empty() ? 1.0f : scales[size_t(c)];
      importance[size_t(c)] = in.sq_mean[size_t(c)] / (s * s);
    }
  }
  return importance;
}

// Q(W diag(s)) diag(s)^-1 of a whole layer, [rows][cols]; scales empty: Q(W).
RowMajorF rounded_weights(const AwqLinear& linear, int64_t cols, std::span<const float> scales,
                          std::span<const float> importance, ThreadPool& pool) {
  const quant::WeightFormat& f = quant::require_format(linear.type);
  RowMajorF out(linear.rows, cols);
  pool.parallel_for(linear.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> scaled(static_cast<size_t>(cols));
    std::vector<uint8_t> bytes(static_cast<size_t>(quant::row_bytes(f, cols)));
    for (int64_t r = r0; r < r1; ++r) {
      round_row(f, linear.w + r * cols, cols, scales, importance, scaled, bytes, &out(r, 0));
    }
  });
  return out;
}

// The MLP's output (act(X G^T + bg) * (X U^T + bu)) D^T of the input's tokens, [n][n_embd].
RowMajorF mlp_output(const float* gate, const float* up, const AwqInput& in, const AwqMlp& mlp, int64_t n_ff,
                     ThreadPool& pool) {
  constexpr int64_t kTokensPerChunk = 128;
  const int64_t cols = in.cols, chunks = (in.n + kTokensPerChunk - 1) / kTokensPerChunk;
  const Eigen::Map<const RowMajorF> g(gate, n_ff, cols), u(up, n_ff, cols), d(mlp.down, mlp.n_embd, n_ff);
  RowMajorF y(in.n, mlp.n_embd);
  pool.parallel_for(chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t t0 = c * kTokensPerChunk, m = std::min(kTokensPerChunk, in.n - t0);
      const Eigen::Map<const RowMajorF> x(in.x + t0 * cols, m, cols);
      RowMajorF h = x * g.transpose();
      const RowMajorF v = x * u.transpose();
      for (int64_t t = 0; t < m; ++t) {
        for (int64_t j = 0; j < n_ff; ++j) {
          float a = h(t, j) + (mlp.gate_bias ? mlp.gate_bias[j] : 0.0f);
          a = mlp.gelu_tanh ? 0.5f * a * (1.0f + std::tanh(0.7978845608f * (a + 0.044715f * a * a * a)))
                            : a / (1.0f + std::exp(-a));
          h(t, j) = a * (v(t, j) + (mlp.up_bias ? mlp.up_bias[j] : 0.0f));
        }
      }
      y.middleRows(t0, m).noalias() = h * d.transpose();
    }
  });
  return y;
}

double group_error(std::span<const AwqLinear> linears, const AwqInput& in, std::span<const float> scales,
                   ThreadPool& pool, const AwqMlp* mlp = nullptr, const RowMajorF* mlp_reference = nullptr) {
  const std::vector<float> importance = scaled_importance(in, scales);
  if (mlp != nullptr) {
    const RowMajorF g = rounded_weights(linears[0], in.cols, scales, importance, pool);
    const RowMajorF u = rounded_weights(linears[1], in.cols, scales, importance, pool);
    return (mlp_output(g.data(), u.data(), in, *mlp, linears[0].rows, pool) - *mlp_reference)
        .cast<double>()
        .squaredNorm();
  }
  double sum = 0.0;
  for (const AwqLinear& l : linears) sum += layer_error(l, in, scales, importance, pool);
  return sum;
}

// Averages v over the query heads that share a kv head: [n_head_kv * head_dim] from [n_head * head_dim].
std::vector<double> tie_heads(const std::vector<double>& v, const AwqTying& t) {
  if (t.n_head == 0) return v;
  const int64_t per_kv = t.n_head / t.n_head_kv;
  std::vector<double> tied(size_t(t.n_head_kv * t.head_dim), 0.0);
  for (int64_t h = 0; h < t.n_head; ++h) {
    for (int64_t d = 0; d < t.head_dim; ++d) tied[size_t((h / per_kv) * t.head_dim + d)] += v[size_t(h * t.head_dim + d)];
  }
  for (double& x : tied) x /= double(per_kv);
  return tied;
}

std::vector<float> untie_heads(const std::vector<double>& tied, const AwqTying& t, int64_t cols) {
  std::vector<float> s(static_cast<size_t>(cols));
  if (t.n_head == 0) {
    for (int64_t c = 0; c < cols; ++c) s[size_t(c)] = float(tied[size_t(c)]);
    return s;
  }
  const int64_t per_kv = t.n_head / t.n_head_kv;
  for (int64_t h = 0; h < t.n_head; ++h) {
    for (int64_t d = 0; d < t.head_dim; ++d) s[size_t(h * t.head_dim + d)] = float(tied[size_t((h / per_kv) * t.head_dim + d)]);
  }
  return s;
}

}  // namespace

AwqScaleResult awq_search_scales(std::span<const AwqLinear> linears, const AwqInput& in, const AwqTying& tying,
                                 const AwqOptions& o, ThreadPool& pool, const AwqMlp* mlp) {
  const int64_t cols = in.cols;
  if (linears.empty() || in.n < 1 || int64_t(in.abs_mean.size()) != cols ||
      (!in.sq_mean.empty() && int64_t(in.sq_mean.size()) != cols)) {
    fail("internal: AWQ scale search needs layers, tokens and per-channel statistics of {} channels", cols);
  }
  if (tying.n_head != 0 && (tying.n_head_kv < 1 || tying.n_head % tying.n_head_kv != 0 ||
                            tying.n_head * tying.head_dim != cols)) {
    fail("internal: AWQ head tying {} x {} heads of {} does not match {} channels", tying.n_head, tying.n_head_kv,
         tying.head_dim, cols);
  }
  // w_mean: per channel, the mean over every row of every layer of |w| / max |w| of its group.
  std::vector<double> w_mean(size_t(cols), 0.0);
  int64_t total_rows = 0;
  for (const AwqLinear& l : linears) {
    const int64_t g = weight_group(quant::require_format(l.type), cols);
    for (int64_t r = 0; r < l.rows; ++r) {
      const float* w = l.w + r * cols;
      for (int64_t g0 = 0; g0 < cols; g0 += g) {
        float top = 0.0f;
        for (int64_t k = g0; k < g0 + g; ++k) top = std::max(top, std::fabs(w[k]));
        for (int64_t k = g0; k < g0 + g; ++k) w_mean[size_t(k)] += double(std::fabs(w[k]) / (top + 1e-6f));
      }
    }
    total_rows += l.rows;
  }
  std::vector<double> x_mean(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    w_mean[size_t(c)] /= double(total_rows);
    x_mean[size_t(c)] = double(in.abs_mean[size_t(c)]);
  }
  const std::vector<double> x_tied = tie_heads(x_mean, tying), w_tied = tie_heads(w_mean, tying);

  RowMajorF mlp_reference;
  if (mlp != nullptr) {
    if (linears.size() != 2 || linears[0].rows != linears[1].rows || mlp->down == nullptr || mlp->n_embd < 1) {
      fail("internal: AWQ's MLP-output error needs the gate and up layers (of equal rows) and the down projection");
    }
    mlp_reference = mlp_output(linears[0].w, linears[1].w, in, *mlp, linears[0].rows, pool);
  }
  AwqScaleResult result;
  result.loss_unscaled = group_error(linears, in, {}, pool, mlp, &mlp_reference);
  result.loss = result.loss_unscaled;
  result.scales.assign(size_t(cols), 1.0f);
  for (int grid = 0; grid < o.n_grid; ++grid) {
    if (o.fixed_grid >= 0 && grid != o.fixed_grid) continue;
    const double ratio = double(grid) / double(o.n_grid);
    std::vector<double> s(x_tied.size());
    double top = 0.0, bottom = std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < s.size(); ++c) {
      double v = o.duo_scaling ? std::pow(x_tied[c], ratio) / (std::pow(w_tied[c], 1.0 - ratio) + 1e-4)
                               : std::pow(x_tied[c], ratio);
      s[c] = std::max(v, 1e-4);
      top = std::max(top, s[c]);
      bottom = std::min(bottom, s[c]);
    }
    const double norm = std::sqrt(top * bottom);
    for (double& v : s) {
      v /= norm;
      if (!std::isfinite(v)) v = 1.0;
    }
    std::vector<float> scales = untie_heads(s, tying, cols);
    const double loss = group_error(linears, in, scales, pool, mlp, &mlp_reference);
    if (loss < result.loss || o.fixed_grid >= 0) {
      result.loss = loss;
      result.grid = grid;
      result.scales = std::move(scales);
    }
  }
  return result;
}

std::vector<float> smoothquant_scales(std::span<const AwqLinear> linears, std::span<const float> x_abs_max,
                                      const AwqTying& tying, double alpha) {
  const int64_t cols = int64_t(x_abs_max.size());
  if (!(alpha >= 0.0 && alpha <= 1.0)) fail("SmoothQuant: the migration strength must be in [0, 1], not {}", alpha);
  std::vector<double> w_max(size_t(cols), 0.0), x_max(static_cast<size_t>(cols));
  for (const AwqLinear& l : linears) {
    for (int64_t r = 0; r < l.rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) w_max[size_t(c)] = std::max(w_max[size_t(c)], double(std::fabs(l.w[r * cols + c])));
    }
  }
  for (int64_t c = 0; c < cols; ++c) x_max[size_t(c)] = double(x_abs_max[size_t(c)]);
  const std::vector<double> x_tied = tie_heads(x_max, tying), w_tied = tie_heads(w_max, tying);
  std::vector<double> s(x_tied.size(), 1.0);
  for (size_t c = 0; c < s.size(); ++c) {
    if (x_tied[c] > 0.0 && w_tied[c] > 0.0) s[c] = std::max(std::pow(x_tied[c], alpha) / std::pow(w_tied[c], 1.0 - alpha), 1e-5);
  }
  return untie_heads(s, tying, cols);
}

AwqScaleResult smoothquant_search(std::span<const AwqLinear> linears, const AwqInput& in, const AwqTying& tying,
                                  std::span<const double> alphas, ThreadPool& pool) {
  if (linears.empty() || in.n < 1 || int64_t(in.abs_max.size()) != in.cols) {
    fail("internal: the SmoothQuant search needs layers, tokens and each channel's max |x| ({} channels)", in.cols);
  }
  const auto error = [&](std::span<const float> scales) {
    double sum = 0.0;
    for (const AwqLinear& l : linears) sum += quantized_output_error(l, in, scales, pool);
    return sum;
  };
  AwqScaleResult result;
  result.scales.assign(size_t(in.cols), 1.0f);
  result.loss_unscaled = result.loss = error(result.scales);
  for (size_t i = 0; i < alphas.size(); ++i) {
    std::vector<float> scales = smoothquant_scales(linears, in.abs_max, tying, alphas[i]);
    const double loss = error(scales);
    if (loss < result.loss) {
      result.loss = loss;
      result.grid = int(i);
      result.scales = std::move(scales);
    }
  }
  return result;
}

void awq_scale_columns(std::span<const AwqLinear> linears, int64_t cols, std::span<const float> scales,
                       ThreadPool& pool) {
  for (const AwqLinear& l : linears) {
    pool.parallel_for(l.rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = 0; c < cols; ++c) l.w[r * cols + c] *= scales[size_t(c)];
      }
    });
  }
}

bool awq_can_clip(DType type) {
  const quant::WeightFormat* f = quant::find_format(type);
  return f != nullptr && f->row_header_bytes == 0 && f->block_size >= 16 && f->block_size <= 128;
}

AwqClipResult awq_clip(const AwqLinear& linear, int64_t cols, const BlockMoments& moments,
                       std::span<const float> scales, std::span<const float> importance, const AwqOptions& o,
                       ThreadPool& pool) {
  const quant::WeightFormat& f = quant::require_format(linear.type);
  const int64_t g = f.block_size;
  if (!awq_can_clip(linear.type) || moments.group != g || moments.cols != cols || cols % g != 0) {
    fail("internal: AWQ cannot clip {} in groups of {} ({} columns, moments in groups of {})",
         dtype_name(linear.type), g, cols, moments.group);
  }
  const int64_t groups = cols / g;
  // The scaled input's moments: E[(x_i / s_i)(x_j / s_j)].
  std::vector<double> h(moments.blocks.size());
  for (int64_t b = 0; b < groups; ++b) {
    for (int64_t i = 0; i < g; ++i) {
      for (int64_t j = 0; j < g; ++j) {
        const size_t at = size_t((b * g + i) * g + j);
        h[at] = moments.blocks[at] / (double(scales[size_t(b * g + i)]) * double(scales[size_t(b * g + j)]));
      }
    }
  }
  const int candidates = std::max(1, int(o.max_shrink * o.n_grid));
  std::vector<double> row_loss(static_cast<size_t>(linear.rows)), row_unclipped(static_cast<size_t>(linear.rows));
  std::vector<int64_t> row_clipped(static_cast<size_t>(linear.rows));
  pool.parallel_for(linear.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> clamped(static_cast<size_t>(g)), q(static_cast<size_t>(g)), best(static_cast<size_t>(g));
    std::vector<uint8_t> bytes(static_cast<size_t>(f.block_bytes));
    std::vector<double> d(static_cast<size_t>(g));
    for (int64_t r = r0; r < r1; ++r) {
      float* w = linear.w + r * cols;
      for (int64_t b = 0; b < groups; ++b) {
        float* wg = w + b * g;
        const double* hg = h.data() + b * g * g;
        float top = 0.0f;
        for (int64_t k = 0; k < g; ++k) top = std::max(top, std::fabs(wg[k]));
        double best_error = std::numeric_limits<double>::infinity();
        int best_step = 0;
        for (int step = 0; step < candidates; ++step) {
          const float limit = float(double(top) * (1.0 - double(step) / double(o.n_grid)));
          for (int64_t k = 0; k < g; ++k) clamped[size_t(k)] = std::clamp(wg[k], -limit, limit);
          quant::quantize_row_with_importance(f, clamped.data(), bytes.data(), g,
                                              importance.empty() ? nullptr : importance.data() + b * g);
          f.dequantize_row(bytes.data(), q.data(), g);
          for (int64_t k = 0; k < g; ++k) d[size_t(k)] = double(q[size_t(k)]) - double(wg[k]);
          double error = 0.0;
          for (int64_t i = 0; i < g; ++i) {
            double row = 0.0;
            for (int64_t j = 0; j < g; ++j) row += hg[i * g + j] * d[size_t(j)];
            error += d[size_t(i)] * row;
          }
          if (step == 0) row_unclipped[size_t(r)] += error;
          if (error < best_error) {
            best_error = error, best_step = step;
            best = clamped;
          }
        }
        row_loss[size_t(r)] += best_error;
        if (best_step > 0) {
          std::copy(best.begin(), best.end(), wg);
          ++row_clipped[size_t(r)];
        }
      }
    }
  });
  AwqClipResult result;
  result.groups = linear.rows * groups;
  for (int64_t r = 0; r < linear.rows; ++r) {
    result.loss += row_loss[size_t(r)];
    result.loss_unclipped += row_unclipped[size_t(r)];
    result.clipped += row_clipped[size_t(r)];
  }
  return result;
}

}  // namespace kestrel::calib
