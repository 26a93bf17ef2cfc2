// GGUF writer (version 3): metadata in insertion order, tensor infos, aligned tensor data.
// The file is written to PATH.tmp and renamed, so a failed write never leaves a half file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "loader/gguf_value.h"

namespace kestrel::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32);

  // Sets a key; a key set twice keeps its first position and takes the new value.
  void set(const std::string& key, Value value);
  void set_string(const std::string& key, std::string v) { set(key, Value::of_string(std::move(v))); }
  void set_u32(const std::string& key, uint32_t v) { set(key, Value::of_u32(v)); }
  void set_f32(const std::string& key, float v) { set(key, Value::of_f32(v)); }
  void set_bool(const std::string& key, bool v) { set(key, Value::of_bool(v)); }

  // Adds a tensor whose bytes the writer owns. dims are innermost first.
  void add_tensor(std::string name, DType type, std::vector<int64_t> dims, std::vector<uint8_t> bytes);
  // Adds a tensor whose bytes stay owned by the caller until write() returns.
  void add_tensor_view(std::string name, DType type, std::vector<int64_t> dims,
                       std::span<const uint8_t> bytes);
  // Adds a tensor whose bytes are produced while write() runs: `fill` is called once, in tensor
  // order, with a buffer of exactly the tensor's size, so a file larger than memory can be
  // written one tensor at a time (only one such buffer is alive at once).
  using TensorFill = std::function<void(std::span<uint8_t> bytes)>;
  void add_tensor_fill(std::string name, DType type, std::vector<int64_t> dims, TensorFill fill);

  void write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> dims;
    std::shared_ptr<std::vector<uint8_t>> owned;
    std::span<const uint8_t> bytes;  // for a filled tensor: empty, size in fill_size
    TensorFill fill;
    uint64_t fill_size = 0;
    uint64_t size() const { return fill ? fill_size : bytes.size(); }
  };
  void add_pending(std::string name, DType type, std::vector<int64_t> dims, uint64_t num_bytes,
                   std::span<const uint8_t> bytes, TensorFill fill);
  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace kestrel::gguf
