#include "engine/gptq_calibration.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "calib/hessian.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/imatrix.h"
#include "quant/format.h"

namespace kestrel {
namespace {

class GptqLayerQuantizer : public ActivationObserver {
 public:
  GptqLayerQuantizer(Model& model, const std::map<std::string, DType>& targets, const GptqCalibrationOptions& o,
                     const std::function<void(const GptqTensorReport&)>& on_tensor)
      : model_(model), targets_(targets), options_(o), on_tensor_(on_tensor), pool_(o.pass.num_threads) {}

  void observe(int64_t layer, LinearKind kind, const float* x, int64_t n, int64_t cols) override {
    importance_.observe(layer, kind, x, n, cols);
    const auto todo = targets_reading(layer, kind);
    if (todo.empty()) return;
    double hessian_seconds = 0.0;
    const calib::Hessian hessian = hessian_of(x, n, cols, todo.front().first, &hessian_seconds);
    for (const auto& [name, k] : todo) {
      quantize(name, model_.weights().layers[size_t(layer)].matrix(k), hessian, hessian_seconds);
      hessian_seconds = 0.0;
    }
  }

  // A routed expert's input (its tokens' rows): its Hessian, then GPTQ of its rows of the gate and
  // up stacks (they share the input) or of the down stack, into the stack's pending encoding.
  // Latent attention's per-head attn_k_b / attn_v_b likewise, head by head (every token).
  void observe_stacked(int64_t layer, LinearKind kind, int64_t index, int64_t n_mat, const float* x, int64_t n,
                       int64_t cols) override {
    importance_.observe_stacked(layer, kind, index, n_mat, x, n, cols);
    const auto todo = targets_reading(layer, kind);
    if (todo.empty()) return;
    double hessian_seconds = 0.0;
    const calib::Hessian hessian = hessian_of(x, n, cols, todo.front().first, &hessian_seconds);
    for (const auto& [name, k] : todo) {
      const WeightView& stack = model_.weights().layers[size_t(layer)].matrix(k);
      PendingStack& p = pending(name, stack, n_mat);
      const int64_t rows = stack.rows / n_mat;
      const WeightView expert = MoeLayerWeights::expert_rows(stack, index, rows);
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<float> w = dequantize_matrix(expert, pool_);
      calib::GptqStats stats;
      const std::vector<uint8_t> bytes = calib::gptq_quantize(p.type, w, rows, stack.cols, hessian, options_.gptq,
                                                              pool_, &stats, options_.measure_loss);
      std::copy(bytes.begin(), bytes.end(), p.bytes.begin() + std::ptrdiff_t(index * rows * p.row_bytes));
      p.done[size_t(index)] = true;
      p.samples += hessian.samples;
      // The loss of the bytes returned (GptqOptions::keep_better may return the baseline's).
      p.stats.proxy_loss += stats.kept_baseline ? stats.proxy_loss_baseline : stats.proxy_loss;
      p.stats.proxy_loss_baseline += stats.proxy_loss_baseline;
      p.stats.dead_columns += stats.dead_columns;
      p.stats.damp_used = std::max(p.stats.damp_used, stats.damp_used);
      p.hessian_seconds += hessian_seconds;
      hessian_seconds = 0.0;  // with the first stack that reads it, as for dense matrices
      p.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }

  // Every routed expert of the stack was shown: the experts no token chose are rounded to nearest
  // (no Hessian to weigh them), and the forward pass reads the stack's encoding from here on.
  // (A stack no token reached at all starts here: every expert by round to nearest.)
  void end_stacked(int64_t layer, LinearKind kind, int64_t n_mat) override {
    const std::string name = linear_tensor_name(layer, kind);
    if (targets_.count(name) == 0 || encoded_.count(name) != 0) return;
    const WeightView& stack = model_.weights().layers[size_t(layer)].matrix(kind);
    PendingStack& p = pending(name, stack, n_mat);
    const int64_t rows = stack.rows / n_mat;
    const quant::WeightFormat& format = quant::require_format(p.type);
    int64_t unrouted = 0;
    for (int64_t e = 0; e < n_mat; ++e) {
      if (p.done[size_t(e)]) continue;
      ++unrouted;
      const std::vector<float> w = dequantize_matrix(MoeLayerWeights::expert_rows(stack, e, rows), pool_);
      for (int64_t r = 0; r < rows; ++r) {
        format.quantize_row(w.data() + r * stack.cols, p.bytes.data() + (e * rows + r) * p.row_bytes, stack.cols);
      }
    }
    EncodedTensor& out = encoded_[name];
    out.type = p.type;
    out.method = "gptq";
    out.bytes = std::move(p.bytes);
    model_.replace_matrix(name, WeightView{p.type, stack.rows, stack.cols, out.bytes.data()});
    GptqTensorReport report{name, p.type, stack.rows, stack.cols, p.samples, p.stats, p.hessian_seconds, p.seconds};
    report.stacked = n_mat;
    report.unseen = unrouted;
    pending_.erase(name);
    if (on_tensor_) on_tensor_(report);
  }

  std::map<std::string, EncodedTensor>& encoded() { return encoded_; }
  ImportanceMatrix& importance() { return importance_.matrix(); }

 private:
  void quantize(const std::string& name, const WeightView& view, const calib::Hessian& hessian,
                double hessian_seconds) {
    const auto start = std::chrono::steady_clock::now();
    const DType type = targets_.at(name);
    const std::vector<float> w = dequantize_matrix(view, pool_);
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

  // The targets not yet encoded among the matrices that read the input shown as `kind`.
  std::vector<std::pair<std::string, LinearKind>> targets_reading(int64_t layer, LinearKind kind) const {
    std::vector<std::pair<std::string, LinearKind>> todo;
    for (LinearKind k : linear_readers_of(kind)) {
      std::string name = linear_tensor_name(layer, k);
      if (targets_.count(name) != 0 && encoded_.count(name) == 0) todo.emplace_back(std::move(name), k);
    }
    return todo;
  }
  // 2/n X^T X of the input x [n][cols]; *seconds: the time it took.
  calib::Hessian hessian_of(const float* x, int64_t n, int64_t cols, const std::string& reader, double* seconds) {
    const auto start = std::chrono::steady_clock::now();
    calib::HessianAccumulator accumulator(cols);
    try {
      accumulator.add(x, n, pool_);
    } catch (const Error& e) {
      fail("{} (the input of {})", e.what(), reader);
    }
    calib::Hessian hessian = accumulator.hessian();
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return hessian;
  }

  // A stack (MoE experts, attention heads) being encoded matrix by matrix.
  struct PendingStack {
    DType type = DType::F32;
    int64_t row_bytes = 0;
    std::vector<uint8_t> bytes;  // [n_mat * rows] encoded rows
    std::vector<bool> done;      // [n_mat]: encoded by GPTQ
    int64_t samples = 0;
    calib::GptqStats stats;
    double hessian_seconds = 0.0, seconds = 0.0;
  };
  PendingStack& pending(const std::string& name, const WeightView& stack, int64_t n_mat) {
    auto [it, fresh] = pending_.try_emplace(name);
    if (fresh) {
      PendingStack& p = it->second;
      p.type = targets_.at(name);
      p.row_bytes = quant::row_bytes(quant::require_format(p.type), stack.cols);
      p.bytes.assign(size_t(stack.rows * p.row_bytes), 0);
      p.done.assign(size_t(n_mat), false);
    }
    return it->second;
  }

  Model& model_;
  const std::map<std::string, DType>& targets_;
  const GptqCalibrationOptions& options_;
  const std::function<void(const GptqTensorReport&)>& on_tensor_;
  ThreadPool pool_;
  ImatrixCollector importance_{/*include_output=*/false};
  std::map<std::string, EncodedTensor> encoded_;
  std::map<std::string, PendingStack> pending_;
};

}  // namespace

std::map<std::string, EncodedTensor> gptq_quantize_model(
    Model& model, std::span<const int32_t> tokens, const std::map<std::string, DType>& targets,
    const GptqCalibrationOptions& o, const std::function<void(const GptqTensorReport&)>& on_tensor,
    ImportanceMatrix* imatrix) {
  for (const auto& [name, type] : targets) {
    if (!calib::gptq_supports(type)) fail("GPTQ cannot quantize '{}' to {}", name, dtype_name(type));
  }
  GptqLayerQuantizer quantizer(model, targets, o, on_tensor);
  CalibrationPass pass = o.pass;
  pass.stacks = true;  // expert stacks (a Hessian per expert from its routed tokens), attention heads
  run_calibration_pass(model, tokens, pass, quantizer, "GPTQ");
  if (imatrix != nullptr) {
    *imatrix = std::move(quantizer.importance());
    imatrix->chunk_count = o.pass.n_chunks;
    imatrix->chunk_size = o.pass.n_ctx;
  }
  return std::move(quantizer.encoded());
}

}  // namespace kestrel
