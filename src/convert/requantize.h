// Re-encodes the weights of a GGUF model in another format (like llama-quantize), optionally
// weighted by an importance matrix. Which type each
// tensor gets is a QuantRecipe's decision (convert/quant_recipe.h): one type for every matrix, or
// a llama.cpp k-quant mixture such as Q4_K_M; a tensor whose rows do not divide into the chosen
// type's blocks falls back to a higher-precision type, and the report says which. 1-D tensors
// (norms) are stored as F32. Rows are re-encoded in parallel.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "convert/imatrix_file.h"
#include "convert/quant_recipe.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "loader/gguf_reader.h"
#include "quant/format.h"

namespace kestrel {

struct RequantizeNote {
  std::string tensor;
  DType from;
  DType to;
  bool fallback;  // the type the recipe picked (`wanted`) did not fit this tensor's rows
  DType wanted;
  bool weighted = false;  // quantized with the imatrix's importance weights
  std::string method;     // of a pre-encoded tensor ("gptq"); empty otherwise
  std::string importance;  // weighted by importance fit_imatrix derived: how (ImportanceMatrix::derived)
};

// A tensor already encoded by a calibrated method (GPTQ): written as it is instead of re-encoded.
struct EncodedTensor {
  DType type;
  std::vector<uint8_t> bytes;
  std::string method;
};

// What a recipe's mixture rules read from the input's metadata.
QuantModelInfo quant_model_info(const gguf::GgufFile& input);

// Which type each tensor of the input gets under `recipe` (the order of the file's tensors).
std::vector<QuantChoice> requantize_plan(const gguf::GgufFile& input, const QuantRecipe& recipe);

// num_threads <= 0: one per available CPU (core/cpu_info.h). The plan is made with has_imatrix set
// to whether `imatrix` is given. With an importance matrix (checked against the input
// first), every tensor it has an entry for whose new type has a weighted quantizer is quantized
// minimising the error weighted by its columns' importance (llama-quantize --imatrix); the others
// as without it (the note says which). With or without one, the token embedding is weighted by
// the importance add_token_embedding_importance derives where the imatrix has no entry for it.
// A tensor in `encoded` is written as given; its type must be the one the plan gives it.
void requantize_gguf(const std::string& input_path, const std::string& output_path,
                     const QuantRecipe& recipe,
                     const std::function<void(const RequantizeNote&)>& on_tensor,
                     int num_threads = 0, const ImportanceMatrix* imatrix = nullptr,
                     const std::map<std::string, EncodedTensor>* encoded = nullptr);
// Every matrix as `target` (pure_quant_recipe(target)).
void requantize_gguf(const std::string& input_path, const std::string& output_path, DType target,
                     const std::function<void(const RequantizeNote&)>& on_tensor);

// `rows` rows of n values at `src` in format `from` re-encoded in `to` at `dst` (rows x
// row_bytes(to, n) bytes), through one float row per thread over the pool. importance(r): null,
// or the column weights row r is quantized with (to's weighted quantizer); no function: none.
void reencode_rows(ThreadPool& pool, const uint8_t* src, const quant::WeightFormat& from, const quant::WeightFormat& to,
                   int64_t rows, int64_t n, uint8_t* dst,
                   const std::function<const float*(int64_t)>& importance = nullptr);

// The type a tensor gets when every matrix is to be `target`: target, or its fallback if rows do
// not divide into target blocks (quant_type_that_fits); 1-D tensors stay F32.
DType requantize_type_for(DType target, int64_t row_length, size_t num_dims);

}  // namespace kestrel
