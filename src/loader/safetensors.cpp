#include "loader/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"

namespace kestrel::safetensors {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // the format's own limit is 100 MB

// Bytes per element of the dtypes the format defines; 0 for unknown.
uint64_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, uint64_t> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U8", 1},  {"U16", 2}, {"U32", 4},  {"U64", 8}, {"BOOL", 1}, {"F8_E4M3", 1},
      {"F8_E5M2", 1}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

}  // namespace

int64_t Tensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::optional<DType> Tensor::float_type() const {
  if (dtype == "F32") return DType::F32;
  if (dtype == "F16") return DType::F16;
  if (dtype == "BF16") return DType::BF16;
  return std::nullopt;
}

float Tensor::float_at(int64_t i) const {
  if (dtype == "F32") {
    float v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, data + 2 * i, 2);
  return dtype == "F16" ? fp16_to_float(h) : bf16_to_float(h);
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path, FileResidency residency) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->mapping_ = std::make_unique<MappedFile>(path, residency);
  const uint8_t* bytes = file->mapping_->data();
  const uint64_t size = file->mapping_->size();
  if (size < 8) fail("{}: not a safetensors file: {} bytes is too short for the header length", path, size);
  uint64_t header_len;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > kMaxHeaderBytes) fail("{}: absurd safetensors header length {}", path, header_len);
  if (header_len > size - 8) {
    fail("{}: truncated file: the header claims {} bytes but only {} follow", path, header_len, size - 8);
  }
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(bytes + 8), reinterpret_cast<const char*>(bytes + 8 + header_len));
  } catch (const json::exception& e) {
    fail("{}: the safetensors header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) fail("{}: the safetensors header must be a JSON object", path);
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  struct Range {
    uint64_t begin, end;
    std::string name;
    bool operator<(const Range& o) const { return begin != o.begin ? begin < o.begin : end < o.end; }
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("{}: __metadata__ must be an object of strings", path);
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail("{}: __metadata__['{}'] must be a string", path, k);
        file->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    Tensor t;
    t.name = name;
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      fail("{}: tensor '{}' needs dtype, shape and two data_offsets", path, name);
    }
    t.dtype = entry["dtype"].get<std::string>();
    const uint64_t element_bytes = dtype_bytes(t.dtype);
    if (element_bytes == 0) fail("{}: tensor '{}' has unknown dtype '{}'", path, name, t.dtype);
    uint64_t elements = 1;
    for (const json& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40)) {
        fail("{}: tensor '{}' has an invalid dimension {}", path, name, d.dump());
      }
      t.shape.push_back(int64_t(d.get<uint64_t>()));
      if (__builtin_mul_overflow(elements, d.get<uint64_t>(), &elements) || elements > (uint64_t(1) << 40)) {
        fail("{}: tensor '{}' has an absurd element count", path, name);
      }
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      fail("{}: tensor '{}' data_offsets must be non-negative integers", path, name);
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (end < begin || end > data_size) {
      fail("{}: tensor '{}' bytes [{}, {}) run past the end of the data ({} bytes): the file is "
           "truncated or corrupt",
           path, name, begin, end, data_size);
    }
    if (end - begin != elements * element_bytes) {
      fail("{}: tensor '{}' has {} bytes but shape and dtype {} need {}", path, name, end - begin,
           t.dtype, elements * element_bytes);
    }
    t.data = bytes + data_start + begin;
    t.num_bytes = end - begin;
    ranges.push_back({begin, end, name});
    file->tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      fail("{}: tensors '{}' and '{}' overlap in the data section", path, ranges[i - 1].name, ranges[i].name);
    }
  }
  return file;
}

const Tensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::unique_ptr<SafetensorsModel> SafetensorsModel::open_folder(const std::string& folder, FileResidency residency) {
  namespace fs = std::filesystem;
  auto model = std::make_unique<SafetensorsModel>();
  std::vector<std::string> paths;
  const fs::path index_path = fs::path(folder) / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    json index;
    try {
      std::ifstream in(index_path);
      index = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", index_path.string(), e.what());
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      fail("{}: missing 'weight_map'", index_path.string());
    }
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) fail("{}: weight_map['{}'] must be a file name", index_path.string(), name);
      const std::string p = (fs::path(folder) / shard.get<std::string>()).string();
      if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
    }
  } else {
    for (const auto& entry : fs::directory_iterator(folder)) {
      if (entry.path().extension() == ".safetensors") paths.push_back(entry.path().string());
    }
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty()) fail("{}: no *.safetensors files", folder);
  for (const std::string& p : paths) {
    model->files_.push_back(SafetensorsFile::open(p, residency));
    for (const auto& [name, tensor] : model->files_.back()->tensors()) {
      if (!model->index_.emplace(name, &tensor).second) {
        fail("{}: tensor '{}' appears in more than one shard", folder, name);
      }
    }
  }
  return model;
}

const Tensor* SafetensorsModel::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : index_) out.push_back(name);
  return out;
}

}  // namespace kestrel::safetensors
