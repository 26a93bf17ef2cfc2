#include "model/tensor_views.h"

#include <fmt/format.h>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "quant/format.h"

namespace kestrel {
namespace {

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string text;
  for (int64_t d : dims) text += fmt::format("{}{}", text.empty() ? "" : ", ", d);
  return text;
}

}  // namespace

const gguf::TensorInfo& require_tensor(const gguf::GgufFile& file, const std::string& name, const std::string& what) {
  const gguf::TensorInfo* t = file.find_tensor(name);
  if (t == nullptr) fail("{}: missing tensor '{}' ({})", file.name(), name, what);
  if (quant::find_format(t->type) == nullptr) {
    fail("{}: tensor '{}' has type {}, which Kestrel cannot compute with yet", file.name(), name, dtype_name(t->type));
  }
  return *t;
}

WeightView matrix_view(const gguf::GgufFile& file, const std::string& name, int64_t rows, int64_t cols,
                       const std::string& what) {
  const gguf::TensorInfo& t = require_tensor(file, name, what);
  if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows) {
    fail("{}: tensor '{}' ({}) should have shape [{}, {}] (GGUF order) but has [{}]", file.name(), name, what,
         cols, rows, shape_text(t.dims));
  }
  return WeightView{t.type, rows, cols, t.data};
}

WeightView stack_view(const gguf::GgufFile& file, const std::string& name, int64_t count, int64_t rows, int64_t cols,
                      const std::string& count_key, const std::string& what) {
  const gguf::TensorInfo& t = require_tensor(file, name, what);
  if (t.dims.size() != 3) {
    fail("{}: tensor '{}' ({}) should be 3-D [{}, {}, {}] (GGUF order: columns, rows, {}) but has [{}]",
         file.name(), name, what, cols, rows, count, what, shape_text(t.dims));
  }
  if (t.dims[2] != count) {
    fail("{}: tensor '{}' holds {} {} but {} is {}", file.name(), name, t.dims[2], what, count_key, count);
  }
  if (t.dims[0] != cols || t.dims[1] != rows) {
    fail("{}: tensor '{}' should have shape [{}, {}, {}] (GGUF order) but has [{}]", file.name(), name, cols,
         rows, count, shape_text(t.dims));
  }
  return WeightView{t.type, count * rows, cols, t.data};
}

WeightView stacked_matrix(const WeightView& stack, int64_t i, int64_t rows) {
  const int64_t row_bytes = quant::row_bytes(quant::require_format(stack.type), stack.cols);
  return WeightView{stack.type, rows, stack.cols, static_cast<const uint8_t*>(stack.data) + i * rows * row_bytes};
}

const float* vector_view(const gguf::GgufFile& file, const std::string& name, int64_t length, const std::string& what,
                         std::vector<std::vector<float>>& owned) {
  const gguf::TensorInfo& t = require_tensor(file, name, what);
  const bool shape_ok = (t.dims.size() == 1 && t.dims[0] == length) ||
                        (t.dims.size() == 2 && t.dims[0] == length && t.dims[1] == 1);
  if (!shape_ok) {
    fail("{}: tensor '{}' ({}) should have shape [{}] but has [{}]", file.name(), name, what, length,
         shape_text(t.dims));
  }
  if (t.type == DType::F32) return reinterpret_cast<const float*>(t.data);
  std::vector<float>& values = owned.emplace_back(size_t(length));
  quant::require_format(t.type).dequantize_row(t.data, values.data(), length);
  return values.data();
}

}  // namespace kestrel
