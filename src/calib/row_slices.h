// Cuts a stream of rows [n][cols], given in calls of any size, into consecutive slices of
// `slice_rows` rows (the last one shorter, at flush). The calibration statistics that sum float
// products over slices of tokens (GPTQ's Hessian, AWQ's block moments) cut them here, so their
// sums are bitwise the same however the rows were split between calls (a calibration run in
// slices of chunks equals one run over all of them). Rows short of a slice wait in a copy (up to
// slice_rows - 1 rows).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kestrel::calib {

class RowSlicer {
 public:
  RowSlicer(int64_t cols, int64_t slice_rows) : cols_(cols), slice_rows_(slice_rows) {}

  // on_slice(const float* rows, int64_t n) for every slice completed by x [n][cols].
  template <class OnSlice>
  void add(const float* x, int64_t n, OnSlice&& on_slice) {
    int64_t t0 = 0;
    if (!waiting_.empty()) {  // complete the waiting slice first
      const int64_t have = int64_t(waiting_.size()) / cols_, take = std::min(slice_rows_ - have, n);
      waiting_.insert(waiting_.end(), x, x + take * cols_);
      t0 = take;
      if (have + take < slice_rows_) return;
      on_slice(waiting_.data(), slice_rows_);
      waiting_.clear();
    }
    for (; n - t0 >= slice_rows_; t0 += slice_rows_) on_slice(x + t0 * cols_, slice_rows_);
    waiting_.assign(x + t0 * cols_, x + n * cols_);
  }

  // The waiting rows as the last (short) slice, if any; their copy's memory is freed.
  template <class OnSlice>
  void flush(OnSlice&& on_slice) {
    if (!waiting_.empty()) on_slice(waiting_.data(), int64_t(waiting_.size()) / cols_);
    waiting_.clear();
    waiting_.shrink_to_fit();
  }

 private:
  int64_t cols_, slice_rows_;
  std::vector<float> waiting_;  // [< slice_rows][cols]
};

}  // namespace kestrel::calib
