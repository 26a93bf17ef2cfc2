#include "engine/compute_reencoding.h"

#include <vector>

#include "convert/quant_recipe.h"
#include "convert/requantize.h"
#include "core/error.h"
#include "model/activation_observer.h"
#include "quant/format.h"

namespace kestrel {

ComputeReencoding::ComputeReencoding(Model& model, DType type, ThreadPool& pool) : model_(model) {
  if (type == DType::Q8_1 || type == DType::Q8_K) {
    fail("{} is an activation type (no weight kernels): the matrices cannot be computed in it", dtype_name(type));
  }
  const quant::WeightFormat& format = quant::require_format(type);
  try {
    // Every dense layer matrix, then an untied output head (the head of a tied model is the
    // embedding's lookup table too, which stays as it is).
    std::vector<std::pair<std::string, const WeightView*>> matrices;
    for (size_t il = 0; il < model.weights().layers.size(); ++il) {
      for (LinearKind kind : kLayerLinearKinds) {
        const WeightView& view = model.weights().layers[il].matrix(kind);
        if (view.data != nullptr) matrices.emplace_back(linear_tensor_name(int64_t(il), kind), &view);
      }  // a MoE layer's FFN and latent attention's K/V have no dense matrix here
    }
    if (!model.weights().tied_output && model.weights().output.data != nullptr) {
      matrices.emplace_back("output.weight", &model.weights().output);
    }
    for (const auto& [name, view_pointer] : matrices) {
      const WeightView view = *view_pointer;
      if (view.type == type || quant_type_that_fits(type, view.cols) != type || !model.can_replace_matrix(name)) {
        ++kept_;
        continue;
      }
      const int64_t row_size = quant::row_bytes(format, view.cols);
      LargeBuffer& copy = copies_.emplace_back(size_t(row_size * view.rows));
      reencode_rows(pool, static_cast<const uint8_t*>(view.data), quant::require_format(view.type), format, view.rows,
                    view.cols, copy.data());
      WeightView replacement = view;
      replacement.type = type;
      replacement.data = copy.data();
      originals_.emplace_back(name, model.replace_matrix(name, replacement));
    }
  } catch (...) {
    for (const auto& [name, original] : originals_) model_.replace_matrix(name, original);
    throw;
  }
}

ComputeReencoding::~ComputeReencoding() {
  for (const auto& [name, original] : originals_) model_.replace_matrix(name, original);
}

}  // namespace kestrel
