// A GGUF file copied through the writer with its metadata and tensors edited: the way the loading
// tests make a bad file from a good one (shared by the model-loading tests).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "test_paths.h"

namespace kestrel::test {

using KeyEdit = std::function<bool(const std::string&, gguf::Value&)>;
using TensorEdit = std::function<bool(gguf::TensorInfo&, std::vector<uint8_t>&)>;

// Copies `source` to a scratch directory named after `name`; `edit_key` may change a value or drop
// the key (return false), `edit_tensor` may change a tensor's name, shape, type or bytes or drop
// it. Returns the copy's path.
inline std::string edited_gguf_copy(const std::string& source_path, const std::string& name, const KeyEdit& edit_key,
                                    const TensorEdit& edit_tensor) {
  const auto source = gguf::GgufFile::open(source_path);
  gguf::GgufWriter writer;
  for (const auto& kv : source->metadata()) {
    gguf::Value value = kv.value;
    if (edit_key(kv.key, value)) writer.set(kv.key, value);
  }
  for (const auto& t : source->tensors()) {
    gguf::TensorInfo info = t;
    std::vector<uint8_t> bytes(t.data, t.data + t.num_bytes);
    if (edit_tensor(info, bytes)) writer.add_tensor(info.name, info.type, info.dims, std::move(bytes));
  }
  const std::string path = scratch_dir(name) + "/model.gguf";
  writer.write(path);
  return path;
}

inline bool keep_key(const std::string&, gguf::Value&) { return true; }
inline bool keep_tensor(gguf::TensorInfo&, std::vector<uint8_t>&) { return true; }

}  // namespace kestrel::test
