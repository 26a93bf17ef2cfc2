// libFuzzer target for the GGUF reader. Any input must either parse or throw kestrel::Error;
// a crash, an out-of-bounds read, undefined behaviour, a leak or any other exception is a
// finding. An input that parses is also walked in full (every value and array item through its
// accessors, every key rendered, every tensor's first and last byte read so the sanitizers check
// they lie in the input) and copied through GgufWriter, whose output must parse back to the same
// content.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <variant>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"

namespace {

using namespace kestrel;
using namespace kestrel::gguf;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "gguf_fuzz: %s\n", what.c_str());
  std::abort();
}

// Calls every accessor of a value and its items. Rendering is left to the caller: a vocabulary's
// 150k items rendered one by one would slow the fuzzer down tenfold.
void walk_value(const Value& value, volatile size_t& sink) {
  sink = sink + value.as_int().value_or(0) + value.as_uint().value_or(0);
  sink = sink + size_t(value.as_float().value_or(0) != 0) + size_t(value.as_bool().value_or(false));
  if (const std::string* s = value.as_string()) sink = sink + s->size();
  if (const Array* array = value.as_array()) {
    for (const Value& item : array->items) {
      if (item.type() != array->element_type) finding("array item of the wrong type");
      walk_value(item, sink);
    }
  }
}

void walk(const GgufFile& file) {
  volatile size_t sink = 0;
  for (const KeyValue& kv : file.metadata()) {
    if (file.find(kv.key) != &kv.value) finding("find() misses key " + kv.key);
    sink = sink + value_to_display_string(kv.value).size();  // renders the first items too
    walk_value(kv.value, sink);
  }
  // The typed getters either answer or throw kestrel::Error for a mistyped key.
  try {
    sink = sink + file.get_string("general.architecture").value_or("").size();
    sink = sink + file.get_uint("general.alignment").value_or(0);
    sink = sink + size_t(file.get_float("general.alignment").value_or(0));
    sink = sink + size_t(file.get_bool("tokenizer.ggml.add_bos_token").value_or(false));
    if (const Array* tokens = file.get_array("tokenizer.ggml.tokens")) sink = sink + tokens->items.size();
  } catch (const Error&) {
  }
  for (const TensorInfo& t : file.tensors()) {
    if (file.find_tensor(t.name) != &t) finding("find_tensor() misses " + t.name);
    if (t.num_bytes == 0 || t.num_bytes != uint64_t(dtype_row_bytes(t.type, t.dims[0]) * t.rows())) {
      finding("inconsistent size of tensor " + t.name);
    }
    sink = sink + dtype_name(t.type).size() + t.data[0] + t.data[t.num_bytes - 1];
  }
}

// Exact equality: floats compare by bit pattern.
bool same_value(const Value& a, const Value& b) {
  if (a.type() != b.type()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b.storage);
        if constexpr (std::is_same_v<T, Array>) {
          if (x.element_type != y.element_type || x.items.size() != y.items.size()) return false;
          for (size_t i = 0; i < x.items.size(); ++i) {
            if (!same_value(x.items[i], y.items[i])) return false;
          }
          return true;
        } else if constexpr (std::is_floating_point_v<T>) {
          return std::memcmp(&x, &y, sizeof x) == 0;
        } else {
          return x == y;
        }
      },
      a.storage);
}

// Writes `original` through GgufWriter and checks the copy has the same keys, values and tensors.
// Key order may differ (a writer with a non-default alignment puts general.alignment first), and
// tensor offsets may (the writer packs tensors).
void check_round_trip(const GgufFile& original) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("gguf_fuzz_" + std::to_string(getpid()) + ".gguf"))
          .string();
  try {
    GgufWriter writer(original.alignment());
    for (const KeyValue& kv : original.metadata()) writer.set(kv.key, kv.value);
    for (const TensorInfo& t : original.tensors()) {
      writer.add_tensor_view(t.name, t.type, t.dims, {t.data, size_t(t.num_bytes)});
    }
    writer.write(path);
  } catch (const Error& e) {
    finding(std::string("the writer refused a file the reader accepted: ") + e.what());
  }
  std::unique_ptr<GgufFile> copy;
  try {
    copy = GgufFile::open(path);
  } catch (const Error& e) {
    finding(std::string("the reader refused the writer's copy: ") + e.what());
  }
  std::remove(path.c_str());

  if (copy->alignment() != original.alignment()) finding("alignment changed");
  if (copy->metadata().size() != original.metadata().size()) finding("key count changed");
  for (const KeyValue& kv : original.metadata()) {
    const Value* copied = copy->find(kv.key);
    if (copied == nullptr || !same_value(kv.value, *copied)) finding("value changed: " + kv.key);
  }
  if (copy->tensors().size() != original.tensors().size()) finding("tensor count changed");
  for (size_t i = 0; i < original.tensors().size(); ++i) {
    const TensorInfo& a = original.tensors()[i];
    const TensorInfo& b = copy->tensors()[i];
    if (a.name != b.name || a.type != b.type || a.dims != b.dims || a.num_bytes != b.num_bytes ||
        std::memcmp(a.data, b.data, a.num_bytes) != 0) {
      finding("tensor changed: " + a.name);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> file;
  try {
    file = GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz-input");
  } catch (const Error& e) {
    // Errors must name the file.
    if (std::strncmp(e.what(), "fuzz-input: ", 12) != 0) finding(std::string("unnamed error: ") + e.what());
    return 0;
  }
  walk(*file);
  check_round_trip(*file);
  return 0;
}
