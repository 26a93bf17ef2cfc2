#include "engine/gptq_calibration.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <vector>

#include "calib/hessian.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/imatrix.h"
#include "quant/format.h"

namespace kestrel {
namespace {

// Each pass of a layer runs to the first input whose readers GPTQ has yet to quantize (the
// importance of every input on the way counted once, in the pass that first reaches it), builds
// that input's Hessian over every slice (a routed expert's from its tokens: one per expert of a
// stack) and, at the pass's end, quantizes its readers, which the later passes compute with.
class GptqLayerQuantizer : public LayerPassObserver {
 public:
  GptqLayerQuantizer(Model& model, const std::map<std::string, DType>& targets, const GptqCalibrationOptions& o,
                     const std::function<void(const GptqTensorReport&)>& on_tensor)
      : model_(model), targets_(targets), options_(o), on_tensor_(on_tensor), pool_(o.pass.num_threads) {}

  void observe(int64_t layer, LinearKind kind, const float* x, int64_t n, int64_t cols) override {
    if (learned_.count(kind) != 0) return;
    importance_.observe(layer, kind, x, n, cols);
    seen_.insert(kind);
    if (targets_reading(layer, kind).empty()) return;
    collect(layer, kind, -1, x, n, cols);
    throw ForwardPassStopped{};
  }

  // A routed expert's input (its tokens' rows; its gate and up share it) or a latent-attention
  // head's: into that matrix's Hessian. The pass stops at the stack's end.
  void observe_stacked(int64_t layer, LinearKind kind, int64_t index, int64_t n_mat, const float* x, int64_t n,
                       int64_t cols) override {
    if (learned_.count(kind) != 0) return;
    importance_.observe_stacked(layer, kind, index, n_mat, x, n, cols);
    seen_.insert(kind);
    if (targets_reading(layer, kind).empty()) return;
    collect(layer, kind, index, x, n, cols);
  }

  // Every routed expert (or head) of the stack shown: stop here if its readers are to be
  // quantized (also when no token of this slice chose any of its experts).
  void end_stacked(int64_t layer, LinearKind kind, int64_t n_mat) override {
    if (learned_.count(kind) != 0 || targets_reading(layer, kind).empty()) return;
    seen_.insert(kind);
    become_current(kind);
    current_stack_ = n_mat;
    throw ForwardPassStopped{};
  }

  void end_pass(int64_t layer, bool stopped) override {
    learned_.insert(seen_.begin(), seen_.end());
    seen_.clear();
    if (!stopped) {
      // The layer is done: no later pass reads its weights, so the file's pages of the matrices
      // left as they were (those GPTQ does not target) are dropped too.
      learned_.clear();
      release_layer_pages(model_, layer);
      return;
    }
    if (!current_) fail("internal: GPTQ's pass stopped in layer {} at no input", layer);
    const LinearKind kind = *current_;
    if (current_stack_ > 0) {
      quantize_stacks(layer, kind, current_stack_);
    } else {
      double hessian_seconds = 0.0;
      const calib::Hessian hessian = hessian_of(-1, linear_tensor_name(layer, kind), &hessian_seconds);
      for (const auto& [name, k] : targets_reading(layer, kind)) {
        quantize(name, model_.weights().layers[size_t(layer)].matrix(k), hessian, hessian_seconds);
        hessian_seconds = 0.0;  // reported with the first matrix that reads it
      }
    }
    accumulators_.clear();
    hessian_seconds_ = 0.0;
    current_.reset();
    current_stack_ = 0;
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
    model_.release_pages(model_.replace_matrix(name, WeightView{type, view.rows, view.cols, out.bytes.data()}));
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
  // Every slice of a pass learns from the same input: the first it reaches.
  void become_current(LinearKind kind) {
    if (current_ && *current_ != kind) fail("internal: GPTQ's pass reached {} before {}", int(kind), int(*current_));
    current_ = kind;
  }

  // Adds x [n][cols], the input of matrix `index` (-1: not a stack) read by the current input's
  // readers, to its Hessian.
  void collect(int64_t layer, LinearKind kind, int64_t index, const float* x, int64_t n, int64_t cols) {
    become_current(kind);
    const auto start = std::chrono::steady_clock::now();
    auto it = accumulators_.try_emplace(index, cols).first;
    try {
      it->second.add(x, n, pool_);
    } catch (const Error& e) {
      fail("{} (the input of {})", e.what(), linear_tensor_name(layer, kind));
    }
    hessian_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // 2/n X^T X of matrix `index`'s inputs; *seconds: the time spent on it (its share of the
  // collection for index -1, all of it: a stack reports its total once).
  calib::Hessian hessian_of(int64_t index, const std::string& reader, double* seconds) {
    const auto start = std::chrono::steady_clock::now();
    calib::Hessian hessian;
    try {
      hessian = accumulators_.at(index).hessian(pool_);
    } catch (const Error& e) {
      fail("{} (the input of {})", e.what(), reader);
    }
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (index < 0) *seconds += hessian_seconds_;
    return hessian;
  }

  // GPTQ of each matrix of the stacks reading input `kind` (a MoE layer's gate and up experts, or
  // its down experts; latent attention's per-head matrices) from its Hessian; the experts no token
  // chose are rounded to nearest (no Hessian to weigh them). The forward pass then reads the
  // stacks' encodings.
  void quantize_stacks(int64_t layer, LinearKind kind, int64_t n_mat) {
    const auto readers = targets_reading(layer, kind);
    std::vector<PendingStack> stacks;
    for (const auto& [name, k] : readers) {
      const WeightView& stack = model_.weights().layers[size_t(layer)].matrix(k);
      PendingStack& p = stacks.emplace_back();
      p.type = targets_.at(name);
      p.row_bytes = quant::row_bytes(quant::require_format(p.type), stack.cols);
      p.bytes.assign(size_t(stack.rows * p.row_bytes), 0);
    }
    double hessian_seconds = hessian_seconds_;  // reported with the first stack
    for (auto& [index, accumulator] : accumulators_) {
      double seconds = 0.0;
      const calib::Hessian hessian = hessian_of(index, readers.front().first, &seconds);
      hessian_seconds += seconds;
      for (size_t i = 0; i < readers.size(); ++i) {
        const WeightView& stack = model_.weights().layers[size_t(layer)].matrix(readers[i].second);
        PendingStack& p = stacks[i];
        const int64_t rows = stack.rows / n_mat;
        const auto t0 = std::chrono::steady_clock::now();
        const std::vector<float> w = dequantize_matrix(MoeLayerWeights::expert_rows(stack, index, rows), pool_);
        calib::GptqStats stats;
        const std::vector<uint8_t> bytes = calib::gptq_quantize(p.type, w, rows, stack.cols, hessian, options_.gptq,
                                                                pool_, &stats, options_.measure_loss);
        std::copy(bytes.begin(), bytes.end(), p.bytes.begin() + std::ptrdiff_t(index * rows * p.row_bytes));
        p.samples += hessian.samples;
        // The loss of the bytes returned (GptqOptions::keep_better may return the baseline's).
        p.stats.proxy_loss += stats.kept_baseline ? stats.proxy_loss_baseline : stats.proxy_loss;
        p.stats.proxy_loss_baseline += stats.proxy_loss_baseline;
        p.stats.dead_columns += stats.dead_columns;
        p.stats.damp_used = std::max(p.stats.damp_used, stats.damp_used);
        p.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
    for (size_t i = 0; i < readers.size(); ++i) {
      const std::string& name = readers[i].first;
      const WeightView& stack = model_.weights().layers[size_t(layer)].matrix(readers[i].second);
      PendingStack& p = stacks[i];
      const int64_t rows = stack.rows / n_mat;
      const quant::WeightFormat& format = quant::require_format(p.type);
      int64_t unrouted = 0;
      for (int64_t e = 0; e < n_mat; ++e) {
        if (accumulators_.count(e) != 0) continue;  // GPTQ'd above
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
      model_.release_pages(model_.replace_matrix(name, WeightView{p.type, stack.rows, stack.cols, out.bytes.data()}));
      GptqTensorReport report{name, p.type, stack.rows, stack.cols, p.samples, p.stats, i == 0 ? hessian_seconds : 0.0,
                              p.seconds};
      report.stacked = n_mat;
      report.unseen = unrouted;
      if (on_tensor_) on_tensor_(report);
    }
  }

  // A stack (MoE experts, attention heads) being encoded matrix by matrix.
  struct PendingStack {
    DType type = DType::F32;
    int64_t row_bytes = 0;
    std::vector<uint8_t> bytes;  // [n_mat * rows] encoded rows
    int64_t samples = 0;
    calib::GptqStats stats;
    double seconds = 0.0;
  };

  Model& model_;
  const std::map<std::string, DType>& targets_;
  const GptqCalibrationOptions& options_;
  const std::function<void(const GptqTensorReport&)>& on_tensor_;
  ThreadPool pool_;
  ImatrixCollector importance_{/*include_output=*/false};
  std::map<std::string, EncodedTensor> encoded_;
  // This layer's inputs learned from in earlier passes, and those this pass has shown.
  std::set<LinearKind> learned_, seen_;
  std::optional<LinearKind> current_;  // the input whose Hessians this pass collects
  int64_t current_stack_ = 0;          // its stack's matrices (0: not a stack)
  std::map<int64_t, calib::HessianAccumulator> accumulators_;  // by matrix of the stack (-1: not a stack)
  double hessian_seconds_ = 0.0;       // spent adding to them
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
  run_layerwise_calibration(model, tokens, pass, quantizer, "GPTQ");
  if (imatrix != nullptr) {
    *imatrix = std::move(quantizer.importance());
    imatrix->chunk_count = o.pass.n_chunks;
    imatrix->chunk_size = o.pass.n_ctx;
  }
  return std::move(quantizer.encoded());
}

}  // namespace kestrel
