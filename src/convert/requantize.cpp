#include "convert/requantize.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/cpu_info.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "quant/format.h"

namespace kestrel {
namespace {

// importance: null, or the entry whose column means weight each matrix's rows (one matrix per
// slice of rows for a 3-D MoE tensor).
std::vector<uint8_t> reencode(ThreadPool& pool, const gguf::TensorInfo& t, const quant::WeightFormat& from,
                              const quant::WeightFormat& to, const ImatrixEntry* importance) {
  const int64_t n = t.dims[0];
  const int64_t rows = t.num_elements / n;
  std::vector<std::vector<float>> means;
  if (importance != nullptr) {
    for (size_t m = 0; m < importance->counts.size(); ++m) means.push_back(importance->mean(int64_t(m)));
  }
  const int64_t rows_per_mat = means.empty() ? rows : rows / int64_t(means.size());
  std::vector<uint8_t> bytes(size_t(rows * quant::row_bytes(to, n)));
  reencode_rows(pool, t.data, from, to, rows, n, bytes.data(), [&](int64_t r) -> const float* {
    return means.empty() ? nullptr : means[size_t(std::min<int64_t>(r / rows_per_mat, int64_t(means.size()) - 1))].data();
  });
  return bytes;
}

}  // namespace

void reencode_rows(ThreadPool& pool, const uint8_t* src, const quant::WeightFormat& from, const quant::WeightFormat& to,
                   int64_t rows, int64_t n, uint8_t* dst, const std::function<const float*(int64_t)>& importance) {
  const int64_t in_row = quant::row_bytes(from, n), out_row = quant::row_bytes(to, n);
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      from.dequantize_row(src + r * in_row, row.data(), n);
      quant::quantize_row_with_importance(to, row.data(), dst + r * out_row, n, importance ? importance(r) : nullptr);
    }
  });
}

// What the mixtures' rules read: {arch}.block_count (or, without it, one more than the highest
// "blk.N." in the tensor names), the head counts (1 when absent) and {arch}.expert_count.
QuantModelInfo quant_model_info(const gguf::GgufFile& file) {
  QuantModelInfo m;
  m.arch = file.get_string("general.architecture").value_or("");
  const auto get = [&](const char* key) { return file.get_uint(m.arch + key); };
  if (const auto count = get(".block_count")) {
    m.n_layer = int64_t(*count);
  } else {
    for (const gguf::TensorInfo& t : file.tensors()) {
      int layer = -1;
      if (std::sscanf(t.name.c_str(), "blk.%d.", &layer) == 1) m.n_layer = std::max<int64_t>(m.n_layer, layer + 1);
    }
  }
  const auto heads = get(".attention.head_count"), kv_heads = get(".attention.head_count_kv");
  if (heads && kv_heads && *kv_heads > 0) m.n_head = int64_t(*heads), m.n_head_kv = int64_t(*kv_heads);
  m.n_expert = int64_t(get(".expert_count").value_or(0));
  return m;
}

DType requantize_type_for(DType target, int64_t row_length, size_t num_dims) {
  if (num_dims < 2) return DType::F32;
  quant::require_format(target);
  return quant_type_that_fits(target, row_length);
}

void requantize_gguf(const std::string& input_path, const std::string& output_path, DType target,
                     const std::function<void(const RequantizeNote&)>& on_tensor) {
  requantize_gguf(input_path, output_path, pure_quant_recipe(target), on_tensor);
}

std::vector<QuantChoice> requantize_plan(const gguf::GgufFile& input, const QuantRecipe& recipe) {
  std::vector<QuantTensorInfo> infos;
  for (const gguf::TensorInfo& t : input.tensors()) infos.push_back({t.name, t.dims, t.type});
  return plan_quantization(recipe, infos, quant_model_info(input));
}

void requantize_gguf(const std::string& input_path, const std::string& output_path,
                     const QuantRecipe& recipe,
                     const std::function<void(const RequantizeNote&)>& on_tensor,
                     int num_threads, const ImportanceMatrix* imatrix,
                     const std::map<std::string, EncodedTensor>* encoded) {
  const auto input = gguf::GgufFile::open(input_path);
  // llama.cpp's has_imatrix: whether one is given decides some mixtures' choices.
  QuantRecipe planned = recipe;
  planned.has_imatrix = imatrix != nullptr;
  // The importance the quantizers weigh by: the given imatrix fitted to the model; without one,
  // only the token embedding's, which comes from the model itself (its first norm's gamma^2).
  ImportanceMatrix fitted;
  if (imatrix != nullptr) {
    fitted = fit_imatrix(*imatrix, *input, "imatrix");
  } else {
    add_token_embedding_importance(fitted, *input);
  }
  const std::vector<QuantChoice> plan = requantize_plan(*input, planned);
  auto encoded_as = [&](const std::string& name) -> const EncodedTensor* {
    if (encoded == nullptr) return nullptr;
    const auto it = encoded->find(name);
    return it != encoded->end() ? &it->second : nullptr;
  };

  // Check every tensor before the long part, so a bad input fails at once.
  for (size_t i = 0; i < plan.size(); ++i) {
    const gguf::TensorInfo& t = input->tensors()[i];
    if (plan[i].type == t.type) continue;
    if (quant::find_format(t.type) == nullptr) {
      fail("{}: tensor '{}' has type {}, which cannot be decoded to re-encode it as {}",
           input_path, t.name, dtype_name(t.type), dtype_name(plan[i].type));
    }
    if (encoded_as(t.name) == nullptr) quant::require_format(plan[i].type);
    // As llama-quantize: given an importance matrix, a tensor of a type that needs one must have
    // its entry (a partial imatrix would otherwise leave it to an unweighted 1.5-3 bit search).
    if (imatrix != nullptr && encoded_as(t.name) == nullptr && requires_imatrix(t.name, plan[i].type, planned) &&
        !fitted.entries.contains(t.name)) {
      fail("the importance matrix has no entry for '{}', which is to be {} (a type that needs one)", t.name,
           dtype_name(plan[i].type));
    }
    const EncodedTensor* pre = encoded_as(t.name);
    if (pre != nullptr && (pre->type != plan[i].type ||
                           int64_t(pre->bytes.size()) != t.num_elements / t.dims[0] *
                                                             quant::row_bytes(quant::require_format(plan[i].type), t.dims[0]))) {
      fail("internal: pre-encoded '{}' is {} ({} bytes), the plan gives {}", t.name, dtype_name(pre->type),
           pre->bytes.size(), dtype_name(plan[i].type));
    }
  }

  gguf::GgufWriter writer(input->alignment());
  for (const gguf::KeyValue& kv : input->metadata()) {
    if (kv.key != "general.alignment") writer.set(kv.key, kv.value);
  }
  writer.set_u32("general.file_type", recipe.file_type);
  writer.set_u32("general.quantization_version", 2);  // GGML_QNT_VERSION, as llama-quantize writes

  if (num_threads <= 0) num_threads = available_cpus();
  ThreadPool pool(num_threads);
  ProgressBar progress("quantizing", int64_t(plan.size()));
  for (size_t i = 0; i < plan.size(); ++i) {
    const gguf::TensorInfo& t = input->tensors()[i];
    const QuantChoice& choice = plan[i];
    bool weighted = false;
    std::string derived;
    const EncodedTensor* pre = encoded_as(t.name);
    if (pre != nullptr) {
      writer.add_tensor_view(t.name, choice.type, t.dims, std::span<const uint8_t>(pre->bytes));
    } else if (choice.type == t.type) {
      writer.add_tensor_view(t.name, t.type, t.dims, std::span<const uint8_t>(t.data, t.num_bytes));
    } else {
      const quant::WeightFormat& to = quant::require_format(choice.type);
      const ImatrixEntry* importance = nullptr;
      if (to.quantize_row_weighted != nullptr && t.dims.size() >= 2) {
        const auto it = fitted.entries.find(t.name);
        if (it != fitted.entries.end()) importance = &it->second;
      }
      weighted = importance != nullptr;
      if (weighted && fitted.derived.contains(t.name)) derived = fitted.derived.at(t.name);
      writer.add_tensor(t.name, choice.type, t.dims, reencode(pool, t, *quant::find_format(t.type), to, importance));
    }
    on_tensor({t.name, t.type, choice.type, choice.quantized && choice.fallback(), choice.wanted, weighted,
               pre != nullptr ? pre->method : std::string(), derived});
    progress.update(int64_t(i) + 1);
  }
  progress.finish();
  writer.write(output_path);
}

}  // namespace kestrel
