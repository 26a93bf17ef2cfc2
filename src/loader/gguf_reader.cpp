#include "loader/gguf_reader.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kestrel::gguf {
namespace {

// Counts read from the file are only checked against the bytes left, and one byte of file can
// become a 40-byte Value: reserving a corrupt count up front in a multi-gigabyte model could ask
// for hundreds of gigabytes and die with bad_alloc before the parse reaches the bytes that show
// the count is wrong. Reserve at most this many; beyond it vectors grow as items are parsed.
constexpr uint64_t kMaxUpfrontReserve = 4096;

size_t capped_reserve(uint64_t count) { return size_t(std::min(count, kMaxUpfrontReserve)); }

// Bounds-checked little-endian reader over the file bytes.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  size_t position() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  T read(const char* what) {
    if (remaining() < sizeof(T)) {
      fail("{}: truncated file: {} needs {} bytes at offset {}, but the file has {} bytes", name_,
           what, sizeof(T), pos_, bytes_.size());
    }
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(const char* what) {
    const uint64_t length = read<uint64_t>(what);
    if (length > kMaxStringBytes) {
      fail("{}: absurd string length {} for {} at offset {}", name_, length, what, pos_ - 8);
    }
    if (length > remaining()) {
      fail("{}: truncated file: {} of {} bytes at offset {} runs past the end ({} bytes)", name_,
           what, length, pos_, bytes_.size());
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), size_t(length));
    pos_ += size_t(length);
    return s;
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& name_;
  size_t pos_ = 0;
};

// Smallest number of bytes one element of `type` occupies in the file (used to reject array
// counts that could not possibly fit in what remains of the file).
uint64_t min_encoded_size(ValueType type) {
  switch (type) {
    case ValueType::UInt8:
    case ValueType::Int8:
    case ValueType::Bool: return 1;
    case ValueType::UInt16:
    case ValueType::Int16: return 2;
    case ValueType::UInt32:
    case ValueType::Int32:
    case ValueType::Float32: return 4;
    case ValueType::String: return 8;
    case ValueType::Array: return 12;
    case ValueType::UInt64:
    case ValueType::Int64:
    case ValueType::Float64: return 8;
  }
  return 1;
}

Value read_value(Cursor& cursor, ValueType type, const std::string& file, const std::string& key,
                 int depth);

Value read_array(Cursor& cursor, const std::string& file, const std::string& key, int depth) {
  if (depth >= kMaxArrayNesting) fail("{}: key '{}': arrays nested too deeply", file, key);
  const uint32_t raw_type = cursor.read<uint32_t>("array element type");
  if (raw_type > uint32_t(ValueType::Float64)) {
    fail("{}: key '{}': unknown array element type {}", file, key, raw_type);
  }
  const auto element_type = ValueType(raw_type);
  const uint64_t count = cursor.read<uint64_t>("array length");
  if (count > cursor.remaining() / min_encoded_size(element_type)) {
    fail("{}: key '{}': array of {} {} elements cannot fit in the {} bytes left in the file", file,
         key, count, value_type_name(element_type), cursor.remaining());
  }
  Array array;
  array.element_type = element_type;
  array.items.reserve(capped_reserve(count));
  for (uint64_t i = 0; i < count; ++i) {
    array.items.push_back(read_value(cursor, element_type, file, key, depth + 1));
  }
  return Value{Value::Storage(std::move(array))};
}

Value read_value(Cursor& cursor, ValueType type, const std::string& file, const std::string& key,
                 int depth) {
  using S = Value::Storage;
  switch (type) {
    case ValueType::UInt8: return Value{S(std::in_place_index<0>, cursor.read<uint8_t>("uint8"))};
    case ValueType::Int8: return Value{S(std::in_place_index<1>, cursor.read<int8_t>("int8"))};
    case ValueType::UInt16: return Value{S(std::in_place_index<2>, cursor.read<uint16_t>("uint16"))};
    case ValueType::Int16: return Value{S(std::in_place_index<3>, cursor.read<int16_t>("int16"))};
    case ValueType::UInt32: return Value{S(std::in_place_index<4>, cursor.read<uint32_t>("uint32"))};
    case ValueType::Int32: return Value{S(std::in_place_index<5>, cursor.read<int32_t>("int32"))};
    case ValueType::Float32: return Value{S(std::in_place_index<6>, cursor.read<float>("float32"))};
    case ValueType::Bool: {
      const uint8_t b = cursor.read<uint8_t>("bool");
      if (b > 1) fail("{}: key '{}': bool value {} is neither 0 nor 1", file, key, int(b));
      return Value{S(std::in_place_index<7>, b == 1)};
    }
    case ValueType::String:
      return Value{S(std::in_place_index<8>, cursor.read_string("string value"))};
    case ValueType::Array: return read_array(cursor, file, key, depth);
    case ValueType::UInt64: return Value{S(std::in_place_index<10>, cursor.read<uint64_t>("uint64"))};
    case ValueType::Int64: return Value{S(std::in_place_index<11>, cursor.read<int64_t>("int64"))};
    case ValueType::Float64: return Value{S(std::in_place_index<12>, cursor.read<double>("float64"))};
  }
  fail("{}: key '{}': unknown value type {}", file, key, uint32_t(type));
}

bool multiply_overflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

int64_t TensorInfo::rows() const {
  int64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
  return rows;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path, FileResidency residency) {
  auto mapping = std::make_unique<MappedFile>(path, residency);
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = path;
  const std::span<const uint8_t> bytes(mapping->data(), mapping->size());
  file->mapping_ = std::move(mapping);
  file->parse_all(bytes);
  return file;
}

std::unique_ptr<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = std::move(name);
  file->parse_all(bytes);
  return file;
}

void GgufFile::parse_all(std::span<const uint8_t> bytes) {
  Cursor cursor(bytes, name_);
  if (bytes.size() < 4) fail("{}: not a GGUF file: only {} bytes long", name_, bytes.size());
  const uint32_t magic = cursor.read<uint32_t>("magic");
  if (magic != kMagic) {
    fail("{}: not a GGUF file: wrong magic {:02x} {:02x} {:02x} {:02x} (expected 'GGUF')", name_,
         bytes[0], bytes[1], bytes[2], bytes[3]);
  }
  version_ = cursor.read<uint32_t>("version");
  if (version_ == 1) fail("{}: GGUF version 1 is obsolete and not supported (need 2 or 3)", name_);
  if (version_ != 2 && version_ != 3) {
    if (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3) {
      fail("{}: big-endian GGUF files are not supported", name_);
    }
    fail("{}: unsupported GGUF version {} (need 2 or 3)", name_, version_);
  }
  const uint64_t tensor_count = cursor.read<uint64_t>("tensor count");
  const uint64_t kv_count = cursor.read<uint64_t>("metadata count");
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
  // 8 + 4 + 8 + 4 + 8 bytes. Counts the file cannot hold get an error that says so up front.
  if (kv_count > cursor.remaining() / 13) {
    fail("{}: truncated or corrupt file: the header claims {} metadata entries, which cannot fit "
         "in the {} bytes that follow it", name_, kv_count, cursor.remaining());
  }
  if (tensor_count > cursor.remaining() / 32) {
    fail("{}: truncated or corrupt file: the header claims {} tensors, which cannot fit in the {} "
         "bytes that follow it", name_, tensor_count, cursor.remaining());
  }

  metadata_.reserve(capped_reserve(kv_count));
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = cursor.read_string("metadata key");
    const uint32_t raw_type = cursor.read<uint32_t>("metadata value type");
    if (raw_type > uint32_t(ValueType::Float64)) {
      fail("{}: key '{}': unknown metadata value type {}", name_, key, raw_type);
    }
    Value value = read_value(cursor, ValueType(raw_type), name_, key, 0);
    if (key_index_.count(key) != 0) fail("{}: duplicate metadata key '{}'", name_, key);
    key_index_.emplace(key, metadata_.size());
    metadata_.push_back({std::move(key), std::move(value)});
  }

  if (const Value* align = find("general.alignment")) {
    const auto a = align->as_uint();
    if (!a || *a == 0 || (*a & (*a - 1)) != 0 || *a > kMaxAlignment) {
      fail("{}: general.alignment is {} but must be a power of two between 1 and {}", name_,
           value_to_display_string(*align), kMaxAlignment);
    }
    alignment_ = uint32_t(*a);
  }

  tensors_.reserve(capped_reserve(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TensorInfo info;
    info.name = cursor.read_string("tensor name");
    const uint32_t n_dims = cursor.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > uint32_t(kMaxDims)) {
      fail("{}: tensor '{}' has {} dimensions (must be 1 to {})", name_, info.name, n_dims, kMaxDims);
    }
    info.num_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = cursor.read<uint64_t>("tensor dimension");
      if (dim == 0 || dim > uint64_t(kMaxTensorElements)) {
        fail("{}: tensor '{}' has absurd dimension {} = {}", name_, info.name, d, dim);
      }
      info.dims.push_back(int64_t(dim));
      if (multiply_overflows(info.num_elements, int64_t(dim), &info.num_elements) ||
          info.num_elements > kMaxTensorElements) {
        fail("{}: tensor '{}' has an absurd element count", name_, info.name);
      }
    }
    const uint32_t raw_type = cursor.read<uint32_t>("tensor type");
    const auto layout = dtype_layout(raw_type);
    if (!layout) fail("{}: tensor '{}' has unknown tensor type {}", name_, info.name, raw_type);
    info.type = DType(raw_type);
    if (info.dims[0] % layout->block_size != 0) {
      fail("{}: tensor '{}' row length {} is not a multiple of the {} block size {}", name_,
           info.name, info.dims[0], layout->name, layout->block_size);
    }
    // Rows are stored back to back; a row may start with a per-row header (per-channel scales of
    // Kestrel's formats), so the size is rows * row bytes, not elements * bytes per element.
    int64_t num_bytes = 0;
    if (multiply_overflows(info.num_elements / info.dims[0], layout_row_bytes(*layout, info.dims[0]),
                           &num_bytes)) {
      fail("{}: tensor '{}' has an absurd byte size", name_, info.name);
    }
    info.num_bytes = uint64_t(num_bytes);
    info.offset = cursor.read<uint64_t>("tensor offset");
    if (info.offset % alignment_ != 0) {
      fail("{}: tensor '{}' offset {} is not aligned to {}", name_, info.name, info.offset,
           alignment_);
    }
    if (tensor_index_.count(info.name) != 0) fail("{}: duplicate tensor name '{}'", name_, info.name);
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  // The data section starts at the next multiple of the alignment after the header.
  const uint64_t header_end = cursor.position();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > bytes.size()) {
    fail("{}: truncated file: tensor data should start at offset {}, but the file has {} bytes",
         name_, data_offset_, bytes.size());
  }
  const uint64_t data_size = bytes.size() >= data_offset_ ? bytes.size() - data_offset_ : 0;
  for (TensorInfo& info : tensors_) {
    if (info.offset > data_size || info.num_bytes > data_size - info.offset) {
      fail("{}: tensor '{}' ({} bytes at data offset {}) runs past the end of the file "
           "(data section holds {} bytes): the file is truncated or corrupt",
           name_, info.name, info.num_bytes, info.offset, data_size);
    }
    info.data = bytes.data() + data_offset_ + info.offset;
  }
}

const Value* GgufFile::find(std::string_view key) const {
  const auto it = key_index_.find(std::string(key));
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const std::string* s = v->as_string()) return *s;
  fail("{}: metadata key '{}' should be a string but is {}", name_, key, value_type_name(v->type()));
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (auto u = v->as_uint()) return u;
  fail("{}: metadata key '{}' should be a non-negative integer but is {} {}", name_, key,
       value_type_name(v->type()), value_to_display_string(*v));
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (auto f = v->as_float()) return f;
  fail("{}: metadata key '{}' should be a number but is {}", name_, key, value_type_name(v->type()));
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (auto b = v->as_bool()) return b;
  fail("{}: metadata key '{}' should be a bool but is {}", name_, key, value_type_name(v->type()));
}

const Array* GgufFile::get_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return nullptr;
  if (const Array* a = v->as_array()) return a;
  fail("{}: metadata key '{}' should be an array but is {}", name_, key, value_type_name(v->type()));
}

std::string GgufFile::require_string(std::string_view key) const {
  if (auto s = get_string(key)) return *s;
  fail("{}: required metadata key '{}' is missing", name_, key);
}

uint64_t GgufFile::require_uint(std::string_view key) const {
  if (auto u = get_uint(key)) return *u;
  fail("{}: required metadata key '{}' is missing", name_, key);
}

double GgufFile::require_float(std::string_view key) const {
  if (auto f = get_float(key)) return *f;
  fail("{}: required metadata key '{}' is missing", name_, key);
}

}  // namespace kestrel::gguf
