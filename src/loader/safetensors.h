// Safetensors reader: an 8-byte little-endian header length, a JSON header mapping tensor names to
// {dtype, shape, data_offsets}, then the data. Every field is validated against the file (header
// size, JSON, dtypes, shapes against byte ranges, ranges inside the data and not overlapping) and a
// bad file is a kestrel::Error naming the file and the tensor. Data is used in place from a
// read-only mapping.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace kestrel::safetensors {

struct Tensor {
  std::string name;
  std::string dtype;             // as written: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;    // outermost first (PyTorch order)
  const uint8_t* data = nullptr;
  uint64_t num_bytes = 0;

  int64_t num_elements() const;
  // The Kestrel/GGML dtype of a float tensor (F32, F16, BF16), or nullopt.
  std::optional<DType> float_type() const;
  // Element i of a float tensor (F32, F16 or BF16; the caller checked float_type) as F32, exactly.
  float float_at(int64_t i) const;
};

class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path, FileResidency residency = FileResidency::Mapped);
  const std::string& path() const { return mapping_->path(); }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const Tensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> mapping_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a Hugging Face model folder: model.safetensors, or the shards listed in
// model.safetensors.index.json, or every *.safetensors file. Names must be unique across shards.
class SafetensorsModel {
 public:
  static std::unique_ptr<SafetensorsModel> open_folder(const std::string& folder,
                                                       FileResidency residency = FileResidency::Mapped);
  const Tensor* find(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const Tensor*> index_;
};

}  // namespace kestrel::safetensors
