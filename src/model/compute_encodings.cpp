#include "model/compute_encodings.h"

#include <algorithm>
#include <thread>

#include "backend/backend.h"
#include "quant/format.h"

namespace kestrel {
namespace {

// Blocks [0, blocks) of `from` into `to`, cut into contiguous ranges over the machine's cores.
void transcode_parallel(DType from, DType to, const uint8_t* src, uint8_t* dst, int64_t blocks) {
  const int64_t src_block = quant::require_format(from).block_bytes, dst_block = quant::require_format(to).block_bytes;
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(1, blocks / 4096));
  std::vector<std::jthread> workers;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = blocks * t / threads, end = blocks * (t + 1) / threads;
    workers.emplace_back([=] {
      quant::transcode_blocks(from, to, src + begin * src_block, dst + begin * dst_block, end - begin);
    });
  }
}

}  // namespace

ComputeEncodingSummary adopt_compute_encodings(ModelWeights& weights, std::vector<LargeBuffer>& owned,
                                               const std::function<void(const void*, size_t)>& release) {
  // An untied head is a matrix like the others; a tied one is the embedding's table, which is then
  // re-encoded for the head's sake (the lookups dequantize the new type to the same values).
  std::vector<WeightView*> matrices;
  const void* table = weights.token_embd.data;
  const bool head_is_table = weights.tied_output && table != nullptr && weights.output.data == table;
  if (!weights.tied_output) matrices.push_back(&weights.output);
  if (head_is_table) matrices.push_back(&weights.token_embd);  // not on a pipeline stage without the head
  for (LayerWeights& l : weights.layers) {
    for (WeightView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) matrices.push_back(v);
    for (WeightView* v : {&l.mla.q_a, &l.mla.q_b, &l.mla.kv_a, &l.mla.k_b, &l.mla.v_b}) matrices.push_back(v);
    MoeLayerWeights& m = l.moe;
    for (WeightView* v : {&m.gate_stack, &m.up_stack, &m.down_stack, &m.shared_gate, &m.shared_up, &m.shared_down}) {
      matrices.push_back(v);
    }
  }
  ComputeEncodingSummary summary;
  for (WeightView* view : matrices) {
    if (view->data == nullptr) continue;
    const DType target = cpu_compute_encoding(view->type);
    if (target == view->type || !quant::can_transcode(view->type, target)) continue;
    const quant::WeightFormat& from = quant::require_format(view->type);
    const quant::WeightFormat& to = quant::require_format(target);
    const int64_t before = view->rows * quant::row_bytes(from, view->cols);
    const int64_t after = view->rows * quant::row_bytes(to, view->cols);
    LargeBuffer& buffer = owned.emplace_back(size_t(after));
    // Row headers are 0 for the transcodable types: the matrix is rows x cols / block_size blocks.
    transcode_parallel(view->type, target, static_cast<const uint8_t*>(view->data), buffer.data(),
                       view->rows * (view->cols / from.block_size));
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
