// What AWQ (calib/awq.h) knows of one input of a layer, over every calibration token: each
// channel's mean |x|, mean x^2 (the imatrix) and max |x|, the evenly spaced tokens its scale
// search measures on, and the input's second moments on the diagonal blocks of each clipped
// format's group (for the clipping search). Gathered call by call as the calibration shows the
// input slice by slice (engine/awq_calibration.h), bitwise the same however the tokens are split
// between calls: the per-channel sums run over the tokens in order, and the block products over
// 4096-token slices cut from the stream of rows (calib/row_slices.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "calib/row_slices.h"
#include "core/thread_pool.h"

namespace kestrel::calib {

// The input's second moments E[x x^T] over all tokens, only on the diagonal blocks of `group`
// columns: [cols / group][group][group], in double.
struct BlockMoments {
  int64_t cols = 0, group = 0;
  std::vector<double> blocks;
};

// block_moments of x [n][cols] in one call.
BlockMoments block_moments(const float* x, int64_t n, int64_t cols, int64_t group, ThreadPool& pool);

struct AwqInputStats {
  int64_t cols = 0;
  std::vector<float> abs_mean, sq_mean, abs_max;  // [cols]
  std::vector<float> sample;                      // [sample_tokens][cols]: tokens i * tokens / sample_tokens
  int64_t sample_tokens = 0;
  std::map<int64_t, BlockMoments> moments;        // by group size
};

class AwqInputAccumulator {
 public:
  // `tokens`: how many the input will be shown in all; the search samples min(tokens,
  // sample_tokens) of them evenly. `groups`: the group sizes to gather block moments for (each
  // must divide cols). `what` names the input in errors.
  AwqInputAccumulator(int64_t cols, int64_t tokens, int64_t sample_tokens, const std::vector<int64_t>& groups,
                      std::string what);
  // x: [n][cols], the next n tokens.
  void add(const float* x, int64_t n, ThreadPool& pool);
  // Throws unless exactly `tokens` were shown, or on a non-finite input.
  AwqInputStats finish(ThreadPool& pool);

 private:
  void add_moments(const float* x, int64_t rows, ThreadPool& pool);

  std::string what_;
  int64_t cols_, tokens_, seen_ = 0;
  std::vector<double> abs_sum_, sq_sum_;
  std::vector<float> abs_max_;
  std::vector<float> sample_;
  int64_t sample_tokens_, sampled_ = 0;
  std::map<int64_t, BlockMoments> moments_;  // sums until finish
  RowSlicer slicer_;
};

}  // namespace kestrel::calib
