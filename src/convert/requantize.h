// Re-encodes the weights of a GGUF model in another format (like llama-quantize): every 2-D
// weight takes the target type; a tensor whose row length is not a multiple of the target's block
// size falls back to F16, and the report says which. 1-D tensors (norms) stay F32.
#pragma once

#include <functional>
#include <string>

#include "core/dtype.h"

namespace kestrel {

struct RequantizeNote {
  std::string tensor;
  DType from;
  DType to;
  bool fallback;  // the requested type did not fit this tensor's rows
};

void requantize_gguf(const std::string& input_path, const std::string& output_path, DType target,
                     const std::function<void(const RequantizeNote&)>& on_tensor);

// The type a tensor gets when `target` is requested: target, or F16 if rows do not divide into
// target blocks; 1-D tensors stay F32.
DType requantize_type_for(DType target, int64_t row_length, size_t num_dims);

}  // namespace kestrel
