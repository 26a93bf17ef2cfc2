#include "engine/tensor_sensitivity.h"

#include <algorithm>

#include "convert/quant_recipe.h"
#include "convert/requantize.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/format.h"

namespace kestrel {
namespace {

// A matrix's rows as F32 ([rows][n]), decoded from the file.
std::vector<float> decode_rows(ThreadPool& pool, const gguf::TensorInfo& t) {
  const quant::WeightFormat* from = quant::find_format(t.type);
  if (from == nullptr) fail("'{}' is {}, which Kestrel cannot decode to measure it", t.name, dtype_name(t.type));
  const int64_t n = t.dims[0], rows = t.num_elements / n, in_row = quant::row_bytes(*from, n);
  std::vector<float> values(size_t(t.num_elements));
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) from->dequantize_row(t.data + r * in_row, values.data() + r * n, n);
  });
  return values;
}

// Encodes rows [rows][n] as `type` (importance-weighted where the format can be) into `bytes` and
// returns the weighted squared error of the encoding.
double encode_and_measure(ThreadPool& pool, const std::vector<float>& values, int64_t n, DType type,
                          const std::vector<float>& importance, std::vector<uint8_t>& bytes) {
  const quant::WeightFormat& to = quant::require_format(type);
  const int64_t rows = int64_t(values.size()) / n, out_row = quant::row_bytes(to, n);
  bytes.assign(size_t(rows * out_row), 0);
  std::vector<double> row_errors(static_cast<size_t>(rows));
  const float* weights = importance.empty() ? nullptr : importance.data();
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    std::vector<float> decoded(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      const float* x = values.data() + r * n;
      quant::quantize_row_with_importance(to, x, bytes.data() + r * out_row, n, weights);
      to.dequantize_row(bytes.data() + r * out_row, decoded.data(), n);
      double e = 0;
      for (int64_t c = 0; c < n; ++c) {
        const double d = double(decoded[size_t(c)]) - x[c];
        e += (weights != nullptr ? weights[c] : 1.0) * d * d;
      }
      row_errors[size_t(r)] = e;
    }
  });
  double total = 0;  // summed in row order: the same at any thread count
  for (double e : row_errors) total += e;
  return total;
}

}  // namespace

std::vector<size_t> sensitivity_tensors(const Model& model) {
  const gguf::GgufFile& file = model.file();
  const std::vector<QuantChoice> plan = requantize_plan(file, pure_quant_recipe(DType::Q4_K));
  std::vector<size_t> out;
  for (size_t i = 0; i < plan.size(); ++i) {
    const gguf::TensorInfo& t = file.tensors()[i];
    if (plan[i].quantized && t.dims.size() == 2 && model.can_replace_matrix(t.name)) out.push_back(i);
  }
  return out;
}

calib::TensorOptions TensorSensitivity::options() const {
  calib::TensorOptions o{name, {}};
  for (size_t i = 0; i < types.size(); ++i) {
    o.options.push_back({types[i], bytes[i], calib::scaled_cost(probe_kld, errors[probe_index], errors[i])});
  }
  return o;
}

std::vector<TensorSensitivity> measure_tensor_sensitivity(
    Model& model, const std::vector<TokenId>& tokens, const SensitivityOptions& options,
    const ImportanceMatrix* imatrix, const std::function<void(const TensorSensitivity&)>& on_tensor) {
  if (std::find(options.candidates.begin(), options.candidates.end(), options.probe) == options.candidates.end()) {
    fail("internal: the probe type {} is not a candidate", dtype_name(options.probe));
  }
  ThreadPool pool(options.num_threads > 0 ? options.num_threads : available_cpus());
  std::vector<float> base_logits;
  PerplexityOptions run = options.perplexity;
  run.base_model = &model;
  run.base_kv = run.kv;
  run.base_logits_cache = &base_logits;
  compute_perplexity(model, tokens, run, nullptr);  // the base's logits, once

  std::vector<TensorSensitivity> out;
  for (size_t i : sensitivity_tensors(model)) {
    const gguf::TensorInfo& t = model.file().tensors()[i];
    const int64_t n = t.dims[0];
    std::vector<float> importance;
    if (imatrix != nullptr) {
      const auto it = imatrix->entries.find(t.name);
      if (it != imatrix->entries.end()) importance = it->second.mean();
    }
    const std::vector<float> values = decode_rows(pool, t);
    TensorSensitivity s;
    s.name = t.name;
    s.elements = t.num_elements;
    std::vector<uint8_t> probe_bytes, bytes;
    for (DType wanted : options.candidates) {
      const DType type = quant_type_that_fits(wanted, n);
      const auto seen = std::find(s.types.begin(), s.types.end(), type);
      if (seen != s.types.end()) {  // two candidates fell back to the same type
        if (wanted == options.probe) s.probe_index = size_t(seen - s.types.begin());
        continue;
      }
      s.types.push_back(type);
      s.errors.push_back(encode_and_measure(pool, values, n, type, importance, bytes));
      s.bytes.push_back(int64_t(bytes.size()));
      if (wanted == options.probe) {
        s.probe_index = s.types.size() - 1;
        probe_bytes.swap(bytes);
      }
    }
    s.probe_type = s.types[s.probe_index];
    if (probe_bytes.empty()) {  // the probe fell back onto an earlier candidate: encode it again
      encode_and_measure(pool, values, n, s.probe_type, importance, probe_bytes);
    }
    const WeightView replacement{s.probe_type, t.dims[1], n, probe_bytes.data()};
    const WeightView original = model.replace_matrix(t.name, replacement);
    PerplexityResult r;
    try {
      r = compute_perplexity(model, tokens, run, nullptr);
    } catch (...) {
      model.replace_matrix(t.name, original);
      throw;
    }
    model.replace_matrix(t.name, original);
    s.probe_kld = std::max(0.0, r.kld->mean);
    s.probe_top1 = r.kld->top1_agreement;
    out.push_back(std::move(s));
    on_tensor(out.back());
  }
  return out;
}

}  // namespace kestrel
