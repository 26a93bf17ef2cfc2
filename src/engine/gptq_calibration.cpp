#include "engine/gptq_calibration.h"

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
    std::vector<std::pair<std::string, LinearKind>> todo;
    for (LinearKind k : linear_readers_of(kind)) {
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
  for (const auto& [name, type] : targets) {
    if (!calib::gptq_supports(type)) fail("GPTQ cannot quantize '{}' to {}", name, dtype_name(type));
  }
  GptqLayerQuantizer quantizer(model, targets, o, on_tensor);
  run_calibration_pass(model, tokens, o.pass, quantizer, "GPTQ");
  if (imatrix != nullptr) {
    *imatrix = std::move(quantizer.importance());
    imatrix->chunk_count = o.pass.n_chunks;
    imatrix->chunk_size = o.pass.n_ctx;
  }
  return std::move(quantizer.encoded());
}

}  // namespace kestrel
