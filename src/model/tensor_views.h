// Checked views of a GGUF file's tensors for the per-layer weight loaders (MoE experts, latent
// attention): the tensor must exist, have a type Kestrel has kernels for and the expected shape;
// otherwise a kestrel::Error names the file, the tensor, what it is for and the shape expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace kestrel::gguf {
class GgufFile;
struct TensorInfo;
}

namespace kestrel {

// The tensor `name`, which must exist with a computable type (`what` says what it is for).
const gguf::TensorInfo& require_tensor(const gguf::GgufFile& file, const std::string& name, const std::string& what);

// A 2-D matrix [rows][cols] (GGUF dims [cols, rows]).
WeightView matrix_view(const gguf::GgufFile& file, const std::string& name, int64_t rows, int64_t cols,
                       const std::string& what);

// A stack of `count` matrices [rows][cols] (GGUF dims [cols, rows, count]) as one 2-D view of
// count * rows rows; matrix i is rows [i * rows, (i + 1) * rows). `count_key` names where count
// came from, for the error.
WeightView stack_view(const gguf::GgufFile& file, const std::string& name, int64_t count, int64_t rows, int64_t cols,
                      const std::string& count_key, const std::string& what);

// Matrix i of a stack_view: rows [i * rows, (i + 1) * rows), in place.
WeightView stacked_matrix(const WeightView& stack, int64_t i, int64_t rows);

// A 1-D tensor of `length` values as F32 (GGUF dims [length] or [length, 1]); other types are
// converted into a vector appended to `owned`.
const float* vector_view(const gguf::GgufFile& file, const std::string& name, int64_t length, const std::string& what,
                         std::vector<std::vector<float>>& owned);

}  // namespace kestrel
