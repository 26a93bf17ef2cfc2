#include "model/compute_encodings.h"

#include <algorithm>
#include <optional>
#include <thread>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "quant/format.h"

namespace kestrel {

ComputeEncodingSummary adopt_compute_encodings(ModelWeights& weights, std::vector<LargeBuffer>& owned,
                                               const std::function<void(const void*, size_t)>& release) {
  // An untied head is a matrix like the layers' (for_each_layer_matrix); a tied one is the
  // embedding's table, which is then re-encoded for the head's sake (the lookups dequantize the new
  // type to the same values).
  std::vector<WeightView*> matrices;
  const void* table = weights.token_embd.data;
  const bool head_is_table = weights.tied_output && table != nullptr && weights.output.data == table;
  if (!weights.tied_output) matrices.push_back(&weights.output);
  if (head_is_table) matrices.push_back(&weights.token_embd);  // not on a pipeline stage without the head
  for (LayerWeights& l : weights.layers) for_each_layer_matrix(l, [&](WeightView& v) { matrices.push_back(&v); });
  ComputeEncodingSummary summary;
  std::optional<ThreadPool> pool;  // started by the first matrix to re-encode
  for (WeightView* view : matrices) {
    if (view->data == nullptr) continue;
    const DType target = cpu_compute_encoding(view->type);
    if (target == view->type || !quant::can_transcode(view->type, target)) continue;
    const quant::WeightFormat& from = quant::require_format(view->type);
    const quant::WeightFormat& to = quant::require_format(target);
    const int64_t before = view->rows * quant::row_bytes(from, view->cols);
    const int64_t after = view->rows * quant::row_bytes(to, view->cols);
    LargeBuffer& buffer = owned.emplace_back(size_t(after));
    if (!pool) pool.emplace(int(std::max(1u, std::thread::hardware_concurrency())));
    // Row headers are 0 for the transcodable types: the matrix is rows x cols / block_size blocks.
    const auto* src = static_cast<const uint8_t*>(view->data);
    pool->parallel_for(view->rows * (view->cols / from.block_size), [&](int64_t begin, int64_t end) {
      quant::transcode_blocks(view->type, target, src + begin * from.block_bytes, buffer.data() + begin * to.block_bytes,
                              end - begin);
    }, 64);
    if (release) release(view->data, size_t(before));
    view->type = target;
    view->data = buffer.data();
    ++summary.matrices;
    summary.bytes_before += before;
    summary.bytes_after += after;
  }
  if (head_is_table) weights.output = weights.token_embd;
  return summary;
}

}  // namespace kestrel
