// GgufFile::from_parts: a GGUF view assembled in memory (e.g. from a Hugging Face folder), so the
// rest of Kestrel reads every model through one interface.
#include "core/error.h"
#include "loader/gguf_reader.h"

namespace kestrel::gguf {

std::unique_ptr<GgufFile> GgufFile::from_parts(std::string name, std::vector<KeyValue> metadata,
                                               std::vector<TensorInfo> tensors,
                                               std::vector<std::shared_ptr<const void>> keep_alive) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = std::move(name);
  file->version_ = 3;
  file->keep_alive_ = std::move(keep_alive);
  for (KeyValue& kv : metadata) {
    if (!file->key_index_.emplace(kv.key, file->metadata_.size()).second) {
      fail("{}: duplicate metadata key '{}'", file->name_, kv.key);
    }
    file->metadata_.push_back(std::move(kv));
  }
  for (TensorInfo& t : tensors) {
    const DTypeLayout layout = dtype_layout(t.type);
    if (t.dims.empty() || t.dims[0] % layout.block_size != 0) {
      fail("{}: tensor '{}' has a row length that does not fit type {}", file->name_, t.name, layout.name);
    }
    t.num_elements = 1;
    for (int64_t d : t.dims) t.num_elements *= d;
    const uint64_t expected = uint64_t(t.num_elements / t.dims[0]) * uint64_t(dtype_row_bytes(t.type, t.dims[0]));
    if (t.num_bytes != expected) {
      fail("{}: tensor '{}' has {} bytes, {} expected", file->name_, t.name, t.num_bytes, expected);
    }
    if (!file->tensor_index_.emplace(t.name, file->tensors_.size()).second) {
      fail("{}: duplicate tensor name '{}'", file->name_, t.name);
    }
    file->tensors_.push_back(std::move(t));
  }
  return file;
}

}  // namespace kestrel::gguf
