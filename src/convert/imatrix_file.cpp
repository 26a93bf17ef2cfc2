#include "convert/imatrix_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "quant/format.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"

namespace kestrel {
namespace {

constexpr const char* kSumSuffix = ".in_sum2";
constexpr const char* kCountSuffix = ".counts";

std::vector<float> read_f32(const gguf::TensorInfo& t, const std::string& path) {
  if (t.type != DType::F32) fail("{}: imatrix tensor '{}' is {}, expected F32", path, t.name, dtype_name(t.type));
  std::vector<float> v(size_t(t.num_elements));
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  return v;
}

ImportanceMatrix load_gguf_imatrix(const std::string& path) {
  const auto file = gguf::GgufFile::open(path);
  const auto type = file->get_string("general.type");
  if (type && *type != "imatrix") fail("{}: a GGUF file of type '{}', not an imatrix", path, *type);
  ImportanceMatrix m;
  if (const gguf::Array* ds = file->get_array("imatrix.datasets")) {
    for (const gguf::Value& v : ds->items) {
      if (const std::string* s = v.as_string()) m.datasets.push_back(*s);
    }
  }
  m.chunk_count = int64_t(file->get_uint("imatrix.chunk_count").value_or(0));
  m.chunk_size = int64_t(file->get_uint("imatrix.chunk_size").value_or(0));
  for (const gguf::TensorInfo& t : file->tensors()) {
    if (!t.name.ends_with(kSumSuffix)) continue;
    const std::string name = t.name.substr(0, t.name.size() - std::strlen(kSumSuffix));
    const gguf::TensorInfo* c = file->find_tensor(name + kCountSuffix);
    if (c == nullptr) fail("{}: imatrix has '{}' but no '{}{}'", path, t.name, name, kCountSuffix);
    const std::vector<float> sums = read_f32(t, path), counts = read_f32(*c, path);
    const int64_t n_mat = t.dims.size() > 1 ? t.dims[1] : 1;
    if (int64_t(counts.size()) != n_mat || t.dims.empty()) {
      fail("{}: '{}' has {} counts for {} matrices", path, name, counts.size(), n_mat);
    }
    ImatrixEntry e;
    e.sum2.assign(sums.begin(), sums.end());
    for (float v : counts) e.counts.push_back(int64_t(v));
    m.entries[name] = std::move(e);
  }
  if (m.entries.empty()) fail("{}: imatrix holds no '*{}' tensors", path, kSumSuffix);
  return m;
}

// llama.cpp's legacy format: int32 n_entries; per entry int32 name length, name, int32 ncall,
// int32 nval, float values[nval] (mean x^2 times ncall); then optional int32 chunk count and the
// dataset name.
ImportanceMatrix load_legacy_imatrix(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  auto read_i32 = [&](const char* what) {
    int32_t v = 0;
    if (!in.read(reinterpret_cast<char*>(&v), sizeof v)) fail("{}: truncated imatrix ({})", path, what);
    return v;
  };
  ImportanceMatrix m;
  const int32_t n = read_i32("entry count");
  if (n <= 0 || n > 1000000) fail("{}: not an imatrix file (entry count {})", path, n);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t len = read_i32("name length");
    if (len <= 0 || len > 4096) fail("{}: malformed imatrix (name length {})", path, len);
    std::string name(size_t(len), '\0');
    if (!in.read(name.data(), len)) fail("{}: truncated imatrix (name)", path);
    const int32_t ncall = read_i32("call count"), nval = read_i32("value count");
    if (nval <= 0 || nval > (1 << 26)) fail("{}: malformed imatrix ('{}' has {} values)", path, name, nval);
    std::vector<float> values(static_cast<size_t>(nval));
    if (!in.read(reinterpret_cast<char*>(values.data()), std::streamsize(nval) * 4)) {
      fail("{}: truncated imatrix ('{}')", path, name);
    }
    ImatrixEntry e;
    e.sum2.assign(values.begin(), values.end());
    e.counts = {int64_t(ncall)};
    m.entries[name] = std::move(e);
  }
  int32_t chunks = 0;
  if (in.read(reinterpret_cast<char*>(&chunks), sizeof chunks)) m.chunk_count = chunks;
  return m;
}

}  // namespace

std::vector<float> ImatrixEntry::mean(int64_t mat) const {
  const int64_t n = n_in();
  std::vector<float> out(static_cast<size_t>(n));
  const double count = double(counts.at(size_t(mat)));
  // An expert no calibration token reached has no data: every channel counts the same (1, as
  // llama-quantize reads such a partial entry), not 0, which would leave nothing to weight by.
  for (int64_t c = 0; c < n; ++c) out[size_t(c)] = count > 0 ? float(sum2[size_t(mat * n + c)] / count) : 1.0f;
  return out;
}

void save_imatrix(const ImportanceMatrix& m, const std::string& path) {
  gguf::GgufWriter writer;
  writer.set_string("general.type", "imatrix");
  std::vector<gguf::Value> datasets;
  for (const std::string& d : m.datasets) datasets.push_back(gguf::Value::of_string(d));
  writer.set("imatrix.datasets", gguf::Value::of_array(gguf::ValueType::String, std::move(datasets)));
  writer.set_u32("imatrix.chunk_count", uint32_t(m.chunk_count));
  writer.set_u32("imatrix.chunk_size", uint32_t(m.chunk_size));
  for (const auto& [name, e] : m.entries) {
    const int64_t n_mat = int64_t(e.counts.size());
    std::vector<uint8_t> sums(e.sum2.size() * sizeof(float)), counts(e.counts.size() * sizeof(float));
    for (size_t i = 0; i < e.sum2.size(); ++i) {
      const float v = float(e.sum2[i]);
      std::memcpy(sums.data() + i * 4, &v, 4);
    }
    for (size_t i = 0; i < e.counts.size(); ++i) {
      const float v = float(e.counts[i]);
      std::memcpy(counts.data() + i * 4, &v, 4);
    }
    // Trailing dimensions of 1 are dropped, as ggml's GGUF writer does.
    std::vector<int64_t> sum_dims{e.n_in()}, count_dims{1};
    if (n_mat > 1) sum_dims.push_back(n_mat), count_dims.push_back(n_mat);
    writer.add_tensor(name + kSumSuffix, DType::F32, sum_dims, std::move(sums));
    writer.add_tensor(name + kCountSuffix, DType::F32, count_dims, std::move(counts));
  }
  writer.write(path);
}

ImportanceMatrix load_imatrix(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the imatrix file", path);
  char magic[4] = {};
  in.read(magic, 4);
  if (!in) fail("{}: too short to be an imatrix file", path);
  in.close();
  return std::memcmp(magic, "GGUF", 4) == 0 ? load_gguf_imatrix(path) : load_legacy_imatrix(path);
}

ImportanceMatrix fit_imatrix(const ImportanceMatrix& m, const gguf::GgufFile& model, const std::string& imatrix_name) {
  ImportanceMatrix fitted = m;
  for (auto& [name, e] : fitted.entries) {
    const gguf::TensorInfo* t = model.find_tensor(name);
    if (t == nullptr) {
      fail("{}: imatrix entry '{}' is not a tensor of {}: an imatrix made for another model?", imatrix_name,
           name, model.name());
    }
    const int64_t n_mat = t->dims.size() > 2 ? t->dims[2] : 1;
    if (e.counts.size() == 1 && n_mat > 1 && !t->dims.empty() && int64_t(e.sum2.size()) == n_mat * t->dims[0]) {
      e.counts.assign(size_t(n_mat), e.counts[0]);
    }
    if (t->dims.empty() || t->dims[0] != e.n_in()) {
      fail("{}: imatrix entry '{}' has {} values per matrix, but {}'s tensor has rows of {}: an imatrix "
           "made for another model?", imatrix_name, name, e.n_in(), model.name(), t->dims.empty() ? 0 : t->dims[0]);
    }
    if (int64_t(e.counts.size()) != n_mat && e.counts.size() != 1) {
      fail("{}: imatrix entry '{}' holds {} matrices, but {}'s tensor has {}: an imatrix made for another "
           "model?", imatrix_name, name, e.counts.size(), model.name(), n_mat);
    }
  }
  add_token_embedding_importance(fitted, model);
  return fitted;
}

std::string add_token_embedding_importance(ImportanceMatrix& m, const gguf::GgufFile& model) {
  constexpr const char* kEmbedding = "token_embd.weight";
  const gguf::TensorInfo* embedding = model.find_tensor(kEmbedding);
  if (embedding == nullptr || embedding->dims.size() != 2) return "";
  const auto measured = m.entries.find(kEmbedding);
  const bool tied_head = measured != m.entries.end() && model.find_tensor("output.weight") == nullptr;
  if (measured != m.entries.end() && (!tied_head || measured->second.counts.size() != 1)) return "";
  for (const char* norm_name : {"token_embd_norm.weight", "blk.0.attn_norm.weight"}) {
    const gguf::TensorInfo* norm = model.find_tensor(norm_name);
    if (norm == nullptr) continue;
    if (norm->num_elements != embedding->dims[0] || (norm->type != DType::F32 && norm->type != DType::F16)) return "";
    std::vector<float> gamma(size_t(norm->num_elements));
    quant::require_format(norm->type).dequantize_row(norm->data, gamma.data(), norm->num_elements);
    double mean = 0.0;
    for (float g : gamma) mean += double(g) * g;
    mean /= double(gamma.size());
    if (!(mean > 0.0) || !std::isfinite(mean)) return "";
    ImatrixEntry e;
    for (float g : gamma) e.sum2.push_back(std::max(double(g) * g, 1e-3 * mean));
    e.counts = {1};
    std::string how = fmt::format("no imatrix entry (a lookup has no inputs): weighted by {}^2, the norm its rows "
                                  "go through first", norm_name);
    if (tied_head) {
      const std::vector<float> head = measured->second.mean();
      double head_mean = 0.0, lookup_mean = 0.0;
      for (float v : head) head_mean += v;
      for (double v : e.sum2) lookup_mean += v;
      head_mean /= double(head.size()), lookup_mean /= double(e.sum2.size());
      if (!(head_mean > 0.0) || !std::isfinite(head_mean)) return "";
      for (size_t c = 0; c < e.sum2.size(); ++c) e.sum2[c] = double(head[c]) / head_mean + e.sum2[c] / lookup_mean;
      how = fmt::format("the tied output head's importance and {}^2 (the lookup's: the norm its rows go through "
                        "first), each scaled to mean 1, summed", norm_name);
    }
    m.entries[kEmbedding] = std::move(e);
    m.derived[kEmbedding] = how;
    return how;
  }
  return "";
}

}  // namespace kestrel
