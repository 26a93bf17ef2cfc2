// GGUF reader (versions 2 and 3). Every size, count and offset is checked against the file before
// it is used; a bad file gives a kestrel::Error naming the file and the problem. Tensor data is
// used in place from a read-only memory mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "loader/gguf_value.h"

namespace kestrel::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian uint32
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;

// Limits of what the reader accepts (the writer refuses to produce anything beyond them). They
// reject absurd values before any allocation is sized from them.
inline constexpr uint64_t kMaxStringBytes = uint64_t(1) << 30;
inline constexpr int kMaxArrayNesting = 8;
inline constexpr uint32_t kMaxAlignment = 65536;
inline constexpr int64_t kMaxTensorElements = int64_t(1) << 40;  // also bounds each dimension

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // innermost first: dims[0] is the row length (GGML's ne0)
  DType type = DType::F32;
  uint64_t offset = 0;        // from the start of the data section
  uint64_t num_bytes = 0;
  int64_t num_elements = 0;
  const uint8_t* data = nullptr;  // points into the mapping

  int64_t rows() const;  // product of dims[1..]
};

struct KeyValue {
  std::string key;
  Value value;
};

class GgufFile {
 public:
  // Maps (or reads into memory: core/mapped_file.h) and parses a file.
  static std::unique_ptr<GgufFile> open(const std::string& path, FileResidency residency = FileResidency::Mapped);
  // Parses bytes held by the caller (they must outlive the object); `name` is used in errors.
  static std::unique_ptr<GgufFile> parse(std::span<const uint8_t> bytes, std::string name);
  // Builds a GGUF view from parts made elsewhere (a Hugging Face folder read as if it were a GGUF
  // file): tensor data pointers must stay valid while `keep_alive` lives. Checks names are unique
  // and sizes match dims and types.
  static std::unique_ptr<GgufFile> from_parts(std::string name, std::vector<KeyValue> metadata,
                                              std::vector<TensorInfo> tensors,
                                              std::vector<std::shared_ptr<const void>> keep_alive);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::vector<KeyValue>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  const Value* find(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;
  // MappedFile::release for tensor bytes this process no longer reads (nothing for a from_parts
  // file or bytes outside the mapping).
  void release_pages(const void* begin, size_t bytes) const {
    if (mapping_ != nullptr) mapping_->release(begin, bytes);
  }

  // Typed accessors. get_* returns nullopt when the key is absent and throws when it is present
  // with the wrong type; require_* also throws when absent. Errors name the file and key.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  const Array* get_array(std::string_view key) const;
  std::string require_string(std::string_view key) const;
  uint64_t require_uint(std::string_view key) const;
  double require_float(std::string_view key) const;

 private:
  GgufFile() = default;
  void parse_all(std::span<const uint8_t> bytes);

  std::string name_;
  std::unique_ptr<MappedFile> mapping_;
  std::vector<std::shared_ptr<const void>> keep_alive_;  // owners of from_parts() data
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> key_index_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace kestrel::gguf
