#include "engine/gptq_calibration.h"

#include <chrono>
#include <vector>

#include "calib/hessian.h"
#include "core/error.h"
#include "engine/imatrix.h"
#include "quant/format.h"
#include "runner/model_runner.h"

namespace kestrel {
namespace {

// The matrices that read the input the forward pass shows with `kind` (q, k and v share theirs,
// gate and up theirs; the observer is shown each of them, and acts on the first).
std::vector<LinearKind> readers_of(LinearKind kind) {
  switch (kind) {
    case LinearKind::AttnQ: return {LinearKind::AttnQ, LinearKind::AttnK, LinearKind::AttnV};
    case LinearKind::AttnOutput: return {LinearKind::AttnOutput};
    case LinearKind::FfnGate: return {LinearKind::FfnGate, LinearKind::FfnUp};
    case LinearKind::FfnDown: return {LinearKind::FfnDown};
    default: return {};  // AttnK, AttnV, FfnUp: done with AttnQ / FfnGate; Output: not reached
  }
}

class GptqLayerQuantizer : public ActivationObserver {
 public:
  GptqLayerQuantizer(Model& model, const std::map<std::string, DType>& targets, const GptqCalibrationOptions& o,
                     const std::function<void(const GptqTensorReport&)>& on_tensor)
      : model_(model), targets_(targets), options_(o), on_tensor_(on_tensor), pool_(o.num_threads) {}

  void observe(int64_t layer, LinearKind kind, const float* x, int64_t n, int64_t cols) override {
    importance_.observe(layer, kind, x, n, cols);
    std::vector<std::pair<std::string, LinearKind>> todo;
    for (LinearKind k : readers_of(kind)) {
      std::string name = linear_tensor_name(layer, k);
      if (targets_.count(name) != 0 && encoded_.count(name) == 0) todo.emplace_back(std::move(name), k);
    }
    if (todo.empty()) return;
    const auto start = std::chrono::steady_clock::now();
    calib::HessianAccumulator accumulator(cols);
    try {
      accumulator.add(x, n, pool_);
    } catch (const Error& e) {
      fail("{} (the input of {})", e.what(), todo.front().first);
    }
    const calib::Hessian hessian = accumulator.hessian();
    double hessian_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& [name, k] : todo) {
      quantize(name, model_.weights().layers[size_t(layer)].matrix(k), hessian, hessian_seconds);
      hessian_seconds = 0.0;
    }
  }

  std::map<std::string, EncodedTensor>& encoded() { return encoded_; }
  ImportanceMatrix& importance() { return importance_.matrix(); }

 private:
  void quantize(const std::string& name, const WeightView& view, const calib::Hessian& hessian,
                double hessian_seconds) {
    const auto start = std::chrono::steady_clock::now();
    const DType type = targets_.at(name);
    const quant::WeightFormat& from = quant::require_format(view.type);
    const int64_t in_row = quant::row_bytes(from, view.cols);
    std::vector<float> w(static_cast<size_t>(view.rows * view.cols));
    pool_.parallel_for(view.rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        from.dequantize_row(static_cast<const uint8_t*>(view.data) + r * in_row, w.data() + r * view.cols, view.cols);
      }
    });
    GptqTensorReport report{name, type, view.rows, view.cols, hessian.samples, {}, hessian_seconds, 0.0};
    EncodedTensor& out = encoded_[name];
    out.type = type;
    out.method = "gptq";
    out.bytes = calib::gptq_quantize(type, w, view.rows, view.cols, hessian, options_.gptq, pool_, &report.stats,
                                     options_.measure_loss);
    // From here on the forward pass computes this layer with its quantized weights.
    model_.replace_matrix(name, WeightView{type, view.rows, view.cols, out.bytes.data()});
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (on_tensor_) on_tensor_(report);
  }

  Model& model_;
  const std::map<std::string, DType>& targets_;
  const GptqCalibrationOptions& options_;
  const std::function<void(const GptqTensorReport&)>& on_tensor_;
  ThreadPool pool_;
  ImatrixCollector importance_{/*include_output=*/false};
  std::map<std::string, EncodedTensor> encoded_;
};

}  // namespace

std::map<std::string, EncodedTensor> gptq_quantize_model(
    Model& model, std::span<const int32_t> tokens, const std::map<std::string, DType>& targets,
    const GptqCalibrationOptions& o, const std::function<void(const GptqTensorReport&)>& on_tensor,
    ImportanceMatrix* imatrix) {
  if (o.n_ctx < 2 || o.n_chunks < 1) fail("GPTQ calibration needs chunks of at least 2 tokens, got {} x {}", o.n_chunks, o.n_ctx);
  if (int64_t(tokens.size()) < o.n_chunks * o.n_ctx) {
    fail("the calibration text has {} tokens: {} chunks of {} tokens need {} (use a longer text, fewer "
         "chunks or a shorter context)", tokens.size(), o.n_chunks, o.n_ctx, o.n_chunks * o.n_ctx);
  }
  for (const auto& [name, type] : targets) {
    if (!calib::gptq_supports(type)) fail("GPTQ cannot quantize '{}' to {}", name, dtype_name(type));
  }
  // One sequence per chunk, each with its own range of blocks in every KV group; no logits.
  RunnerConfig config;
  config.num_threads = o.num_threads;
  config.kv = model.kv_spec(DType::F16, DType::F16);
  const int block_size = config.kv.block_size;
  const int64_t blocks_per_seq = (o.n_ctx + block_size - 1) / block_size;
  const int num_groups = int(model.kv_layout().group_windows.size());
  config.group_blocks.assign(size_t(num_groups), blocks_per_seq * o.n_chunks);
  ModelRunner runner(model, config);

  std::vector<std::vector<int32_t>> chunk_tokens(size_t(o.n_chunks));
  std::vector<std::vector<BlockId>> tables(size_t(o.n_chunks));
  std::vector<SequenceChunk> chunks(size_t(o.n_chunks));
  for (int64_t s = 0; s < o.n_chunks; ++s) {
    auto& ct = chunk_tokens[size_t(s)];
    ct.assign(tokens.begin() + std::ptrdiff_t(s * o.n_ctx), tokens.begin() + std::ptrdiff_t((s + 1) * o.n_ctx));
    if (o.bos_token >= 0) ct[0] = o.bos_token;
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[size_t(s)].push_back(BlockId(s * blocks_per_seq + b));
    SequenceChunk& c = chunks[size_t(s)];
    c.tokens = ct;
    c.block_tables.assign(size_t(num_groups), tables[size_t(s)]);
    c.logits_from = -1;
  }
  GptqLayerQuantizer quantizer(model, targets, o, on_tensor);
  runner.set_activation_observer(&quantizer);
  runner.execute(chunks);
  if (imatrix != nullptr) {
    *imatrix = std::move(quantizer.importance());
    imatrix->chunk_count = o.n_chunks;
    imatrix->chunk_size = o.n_ctx;
  }
  return std::move(quantizer.encoded());
}

}  // namespace kestrel
