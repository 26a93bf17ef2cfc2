#include "calib/awq_input.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include <Eigen/Core>

#include "core/error.h"

namespace kestrel::calib {
namespace {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;

constexpr int64_t kSliceTokens = 4096;  // tokens per float block product, summed in double

}  // namespace

BlockMoments block_moments(const float* x, int64_t n, int64_t cols, int64_t group, ThreadPool& pool) {
  AwqInputAccumulator acc(cols, n, 0, {group}, "the input");
  acc.add(x, n, pool);
  return std::move(acc.finish(pool).moments.at(group));
}

AwqInputAccumulator::AwqInputAccumulator(int64_t cols, int64_t tokens, int64_t sample_tokens,
                                         const std::vector<int64_t>& groups, std::string what)
    : what_(std::move(what)),
      cols_(cols),
      tokens_(tokens),
      abs_sum_(size_t(cols), 0.0),
      sq_sum_(size_t(cols), 0.0),
      abs_max_(size_t(cols), 0.0f),
      sample_tokens_(std::min(tokens, sample_tokens)),
      slicer_(cols, kSliceTokens) {
  if (cols < 1 || tokens < 1) fail("internal: AWQ statistics of {} tokens x {} channels", tokens, cols);
  sample_.resize(size_t(std::max<int64_t>(sample_tokens_, 0) * cols));
  for (int64_t g : groups) {
    if (g < 1 || cols % g != 0) fail("internal: {} columns do not split into groups of {}", cols, g);
    moments_.emplace(g, BlockMoments{cols, g, std::vector<double>(size_t(cols * g), 0.0)});
  }
}

void AwqInputAccumulator::add(const float* x, int64_t n, ThreadPool& pool) {
  if (n <= 0) return;
  if (seen_ + n > tokens_) fail("internal: {} shown {} tokens of the {} expected", what_, seen_ + n, tokens_);
  pool.parallel_for(cols_, [&](int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < n; ++t) {
      const float* row = x + t * cols_;
      for (int64_t c = c0; c < c1; ++c) {
        abs_sum_[size_t(c)] += std::fabs(double(row[c]));
        sq_sum_[size_t(c)] += double(row[c]) * double(row[c]);
        abs_max_[size_t(c)] = std::max(abs_max_[size_t(c)], std::fabs(row[c]));
      }
    }
  });
  // The sampled tokens i * tokens / sample_tokens that fall in [seen, seen + n).
  for (; sampled_ < sample_tokens_; ++sampled_) {
    const int64_t t = sampled_ * tokens_ / sample_tokens_;
    if (t >= seen_ + n) break;
    std::memcpy(&sample_[size_t(sampled_ * cols_)], x + (t - seen_) * cols_, size_t(cols_) * sizeof(float));
  }
  seen_ += n;
  if (!moments_.empty()) slicer_.add(x, n, [&](const float* rows, int64_t count) { add_moments(rows, count, pool); });
}

void AwqInputAccumulator::add_moments(const float* x, int64_t rows, ThreadPool& pool) {
  for (auto& [group, m] : moments_) {
    pool.parallel_for(cols_ / group, [&, g = group](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const Eigen::Map<const RowMajorF, 0, Stride> xg(x + b * g, rows, g, Stride(cols_));
        const RowMajorF p = xg.transpose() * xg;
        double* out = m.blocks.data() + b * g * g;
        for (int64_t i = 0; i < g * g; ++i) out[i] += double(p.data()[i]);
      }
    });
  }
}

AwqInputStats AwqInputAccumulator::finish(ThreadPool& pool) {
  if (seen_ != tokens_) fail("internal: {} shown {} tokens of the {} expected", what_, seen_, tokens_);
  slicer_.flush([&](const float* rows, int64_t count) { add_moments(rows, count, pool); });
  AwqInputStats s;
  s.cols = cols_;
  s.abs_mean.resize(size_t(cols_));
  s.sq_mean.resize(size_t(cols_));
  for (int64_t c = 0; c < cols_; ++c) {
    if (!std::isfinite(abs_sum_[size_t(c)]) || !std::isfinite(sq_sum_[size_t(c)])) {
      fail("non-finite calibration input to {} (channel {})", what_, c);
    }
    s.abs_mean[size_t(c)] = float(abs_sum_[size_t(c)] / double(tokens_));
    s.sq_mean[size_t(c)] = float(sq_sum_[size_t(c)] / double(tokens_));
  }
  s.abs_max = std::move(abs_max_);
  s.sample = std::move(sample_);
  s.sample_tokens = sample_tokens_;
  for (auto& [group, m] : moments_) {
    for (double& v : m.blocks) v /= double(tokens_);
  }
  s.moments = std::move(moments_);
  return s;
}

}  // namespace kestrel::calib
