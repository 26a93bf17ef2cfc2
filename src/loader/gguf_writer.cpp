#include "loader/gguf_writer.h"

#include <fmt/ranges.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <type_traits>

#include "core/error.h"
#include "loader/gguf_reader.h"

namespace kestrel::gguf {
namespace {

class ByteSink {
 public:
  explicit ByteSink(std::FILE* file, const std::string& path) : file_(file), path_(path) {}

  void write(const void* data, size_t size) {
    if (size > 0 && std::fwrite(data, 1, size, file_) != size) {
      fail("{}: write failed: {}", path_, std::strerror(errno));
    }
    written_ += size;
  }
  template <typename T>
  void put(T value) {
    write(&value, sizeof value);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    write(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static const uint8_t zeros[256] = {};
    while (written_ % alignment != 0) {
      const uint64_t n = std::min<uint64_t>(alignment - written_ % alignment, sizeof zeros);
      write(zeros, size_t(n));
    }
  }
  uint64_t written() const { return written_; }

 private:
  std::FILE* file_;
  const std::string& path_;
  uint64_t written_ = 0;
};

// Refuses values the reader would reject, so that every file the writer produces reads back:
// GGUF arrays are homogeneous (the element type is stored once), nesting and string sizes are
// limited by the reader.
void check_value(const std::string& key, const Value& value, int depth) {
  if (const std::string* s = value.as_string(); s != nullptr && s->size() > kMaxStringBytes) {
    fail("metadata key '{}': string of {} bytes is longer than GGUF readers accept ({})", key,
         s->size(), kMaxStringBytes);
  }
  const Array* array = value.as_array();
  if (array == nullptr) return;
  if (depth >= kMaxArrayNesting) {
    fail("metadata key '{}': arrays nested more than {} deep", key, kMaxArrayNesting);
  }
  for (const Value& item : array->items) {
    if (item.type() != array->element_type) {
      fail("metadata key '{}': array of {} holds a {}", key, value_type_name(array->element_type),
           value_type_name(item.type()));
    }
    check_value(key, item, depth + 1);
  }
}

void write_payload(ByteSink& sink, const Value& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          sink.put_string(v);
        } else if constexpr (std::is_same_v<T, Array>) {
          sink.put<uint32_t>(uint32_t(v.element_type));
          sink.put<uint64_t>(v.items.size());
          for (const Value& item : v.items) write_payload(sink, item);
        } else if constexpr (std::is_same_v<T, bool>) {
          sink.put<uint8_t>(v ? 1 : 0);
        } else {
          sink.put<T>(v);
        }
      },
      value.storage);
}

void write_value(ByteSink& sink, const Value& value) {
  sink.put<uint32_t>(uint32_t(value.type()));
  write_payload(sink, value);
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kMaxAlignment) {
    fail("GGUF alignment must be a power of two between 1 and {}, got {}", kMaxAlignment, alignment);
  }
  if (alignment != kDefaultAlignment) set("general.alignment", Value::of_u32(alignment));
}

void GgufWriter::set(const std::string& key, Value value) {
  check_value(key, value, 0);
  // The padding the writer emits follows alignment_; a different general.alignment would make
  // readers look for tensor data at the wrong offsets.
  if (key == "general.alignment" && value.as_uint() != std::optional<uint64_t>(alignment_)) {
    fail("general.alignment {} differs from the writer's alignment {}: pass it to the GgufWriter "
         "constructor instead", value_to_display_string(value), alignment_);
  }
  for (auto& [existing_key, existing_value] : metadata_) {
    if (existing_key == key) {
      existing_value = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<int64_t> dims,
                            std::vector<uint8_t> bytes) {
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  const std::span<const uint8_t> view(owned->data(), owned->size());
  add_tensor_view(std::move(name), type, std::move(dims), view);
  tensors_.back().owned = std::move(owned);
}

void GgufWriter::add_tensor_view(std::string name, DType type, std::vector<int64_t> dims,
                                 std::span<const uint8_t> bytes) {
  add_pending(std::move(name), type, std::move(dims), bytes.size(), bytes, nullptr);
}

void GgufWriter::add_tensor_fill(std::string name, DType type, std::vector<int64_t> dims,
                                 TensorFill fill) {
  if (!fill) fail("tensor '{}': no fill function", name);
  add_pending(std::move(name), type, std::move(dims), 0, {}, std::move(fill));
}

void GgufWriter::add_pending(std::string name, DType type, std::vector<int64_t> dims,
                             uint64_t num_bytes, std::span<const uint8_t> bytes, TensorFill fill) {
  if (dims.empty() || dims.size() > size_t(kMaxDims)) {
    fail("tensor '{}': {} dimensions (must be 1 to {})", name, dims.size(), kMaxDims);
  }
  const DTypeLayout layout = dtype_layout(type);
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (d <= 0 || __builtin_mul_overflow(elements, d, &elements) || elements > kMaxTensorElements) {
      fail("tensor '{}': dimensions {} must be positive with at most {} elements in all", name,
           fmt::join(dims, " x "), kMaxTensorElements);
    }
  }
  if (dims[0] % layout.block_size != 0) {
    fail("tensor '{}': row length {} is not a multiple of the {} block size {}", name, dims[0],
         layout.name, layout.block_size);
  }
  const uint64_t expected = uint64_t(elements / dims[0] * layout_row_bytes(layout, dims[0]));
  if (fill) num_bytes = expected;
  if (num_bytes != expected) {
    fail("tensor '{}': {} bytes given, {} expected for {} x {}", name, num_bytes, expected,
         elements, layout.name);
  }
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) fail("tensor '{}' added twice", name);
  }
  const uint64_t fill_size = fill ? expected : 0;
  tensors_.push_back({std::move(name), type, std::move(dims), nullptr, bytes, std::move(fill),
                      fill_size});
}

void GgufWriter::write(const std::string& path) const {
  const std::string tmp_path = path + ".tmp";
  std::FILE* file = std::fopen(tmp_path.c_str(), "wb");
  if (file == nullptr) fail("{}: cannot create: {}", tmp_path, std::strerror(errno));
  try {
    ByteSink sink(file, tmp_path);
    sink.put<uint32_t>(kMagic);
    sink.put<uint32_t>(3);
    sink.put<uint64_t>(tensors_.size());
    sink.put<uint64_t>(metadata_.size());
    for (const auto& [key, value] : metadata_) {
      sink.put_string(key);
      write_value(sink, value);
    }
    uint64_t offset = 0;
    for (const PendingTensor& t : tensors_) {
      sink.put_string(t.name);
      sink.put<uint32_t>(uint32_t(t.dims.size()));
      for (int64_t d : t.dims) sink.put<uint64_t>(uint64_t(d));
      sink.put<uint32_t>(uint32_t(t.type));
      sink.put<uint64_t>(offset);
      offset += (t.size() + alignment_ - 1) / alignment_ * alignment_;
    }
    sink.pad_to(alignment_);
    std::vector<uint8_t> fill_buffer;  // reused by every filled tensor
    for (const PendingTensor& t : tensors_) {
      if (t.fill) {
        fill_buffer.resize(size_t(t.fill_size));
        t.fill(std::span<uint8_t>(fill_buffer));
        sink.write(fill_buffer.data(), fill_buffer.size());
      } else {
        sink.write(t.bytes.data(), t.bytes.size());
      }
      sink.pad_to(alignment_);
    }
    if (std::fclose(file) != 0) {
      file = nullptr;
      fail("{}: close failed: {}", tmp_path, std::strerror(errno));
    }
    file = nullptr;
    if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
      fail("{}: cannot rename to {}: {}", tmp_path, path, std::strerror(errno));
    }
  } catch (...) {
    if (file != nullptr) std::fclose(file);
    std::remove(tmp_path.c_str());
    throw;
  }
}

}  // namespace kestrel::gguf
