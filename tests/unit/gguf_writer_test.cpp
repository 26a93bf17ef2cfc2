// GgufWriter: everything written reads back identically through GgufFile (all 13 value types,
// nested and empty arrays, alignments, tensor types), the byte layout follows the spec, a copy of
// stories260K.gguf is faithful, and failed writes leave nothing behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "test_paths.h"

namespace kestrel::gguf {
namespace {

namespace fs = std::filesystem;
using S = Value::Storage;

// Exact equality: floats compare by bit pattern, so NaN payloads and -0.0 must survive too.
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

void expect_same_metadata(const GgufFile& a, const GgufFile& b) {
  ASSERT_EQ(a.metadata().size(), b.metadata().size());
  for (size_t i = 0; i < a.metadata().size(); ++i) {
    EXPECT_EQ(a.metadata()[i].key, b.metadata()[i].key) << i;
    EXPECT_TRUE(same_value(a.metadata()[i].value, b.metadata()[i].value))
        << a.metadata()[i].key << ": " << value_to_display_string(a.metadata()[i].value) << " vs "
        << value_to_display_string(b.metadata()[i].value);
  }
}

Value array_of(ValueType type, std::vector<Value> items) {
  return Value::of_array(type, std::move(items));
}

std::vector<uint8_t> pattern_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = uint8_t(seed + i * 7);
  return bytes;
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(GgufWriterTest, EveryValueTypeRoundTrips) {
  const std::string path = test::scratch_dir("gguf_writer_values") + "/values.gguf";
  std::vector<std::pair<std::string, Value>> values = {
      {"t.uint8", Value{S(std::in_place_index<0>, uint8_t(255))}},
      {"t.int8", Value{S(std::in_place_index<1>, int8_t(-128))}},
      {"t.uint16", Value{S(std::in_place_index<2>, uint16_t(65535))}},
      {"t.int16", Value{S(std::in_place_index<3>, int16_t(-32768))}},
      {"t.uint32", Value::of_u32(0xFFFFFFFFu)},
      {"t.int32", Value::of_i32(std::numeric_limits<int32_t>::min())},
      {"t.float32", Value::of_f32(-0.0f)},
      {"t.float32.nan", Value::of_f32(std::bit_cast<float>(0x7FC01234u))},
      {"t.bool.true", Value::of_bool(true)},
      {"t.bool.false", Value::of_bool(false)},
      {"t.string", Value::of_string("h\xC3\xA9llo \"w\"\n{}")},
      {"t.string.empty", Value::of_string("")},
      {"t.string.nul", Value::of_string(std::string("a\0b", 3))},
      {"t.uint64", Value::of_u64(std::numeric_limits<uint64_t>::max())},
      {"t.int64", Value{S(std::in_place_index<11>, std::numeric_limits<int64_t>::min())}},
      {"t.float64", Value{S(std::in_place_index<12>, 1.0 / 3.0)}},
      {"t.float64.inf", Value{S(std::in_place_index<12>, -HUGE_VAL)}},
      {"t.array.int32", array_of(ValueType::Int32, {Value::of_i32(1), Value::of_i32(-2)})},
      {"t.array.string", array_of(ValueType::String, {Value::of_string("a"), Value::of_string("")})},
      {"t.array.bool", array_of(ValueType::Bool, {Value::of_bool(true), Value::of_bool(false)})},
      {"t.array.float64", array_of(ValueType::Float64, {Value{S(std::in_place_index<12>, 2.5)}})},
      {"t.array.empty.uint8", array_of(ValueType::UInt8, {})},
      {"t.array.empty.string", array_of(ValueType::String, {})},
      {"t.array.empty.array", array_of(ValueType::Array, {})},
      // Inner arrays carry their own element type, so siblings may differ.
      {"t.array.nested",
       array_of(ValueType::Array,
                {array_of(ValueType::UInt16, {Value{S(std::in_place_index<2>, uint16_t(7))}}),
                 array_of(ValueType::String, {Value::of_string("x")}),
                 array_of(ValueType::Array, {array_of(ValueType::Float32, {Value::of_f32(1.5f)})}),
                 array_of(ValueType::Int64, {})})},
  };
  // The reader's nesting limit, reached exactly.
  Value deepest = array_of(ValueType::UInt8, {Value{S(std::in_place_index<0>, uint8_t(9))}});
  for (int depth = 1; depth < kMaxArrayNesting; ++depth) {
    deepest = array_of(ValueType::Array, {deepest});
  }
  values.emplace_back("t.array.deepest", deepest);

  GgufWriter writer;
  for (const auto& [key, value] : values) writer.set(key, value);
  // All 13 types are covered.
  std::vector<bool> seen(13, false);
  for (const auto& kv : values) seen[size_t(kv.second.type())] = true;
  for (size_t t = 0; t < seen.size(); ++t) EXPECT_TRUE(seen[t]) << value_type_name(ValueType(t));
  writer.write(path);

  const auto file = GgufFile::open(path);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_TRUE(file->tensors().empty());
  ASSERT_EQ(file->metadata().size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(file->metadata()[i].key, values[i].first);
    EXPECT_TRUE(same_value(file->metadata()[i].value, values[i].second)) << values[i].first;
  }
  EXPECT_EQ(file->find("general.alignment"), nullptr);  // the default is not written
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(GgufWriterTest, SettingAKeyTwiceKeepsItsPosition) {
  const std::string path = test::scratch_dir("gguf_writer_reset") + "/reset.gguf";
  GgufWriter writer;
  writer.set_string("a", "first");
  writer.set_u32("b", 2);
  writer.set_f32("a", 0.5f);
  writer.set_bool("c", true);
  writer.write(path);
  const auto file = GgufFile::open(path);
  ASSERT_EQ(file->metadata().size(), 3u);
  EXPECT_EQ(file->metadata()[0].key, "a");
  EXPECT_EQ(file->get_float("a"), 0.5);
  EXPECT_EQ(file->get_uint("b"), 2u);
  EXPECT_EQ(file->get_bool("c"), true);
}

// The writer's bytes checked against the spec by hand, so that a mistake shared by the reader
// and the writer cannot hide.
TEST(GgufWriterTest, ByteLayoutFollowsTheSpec) {
  const std::string path = test::scratch_dir("gguf_writer_layout") + "/layout.gguf";
  GgufWriter writer;
  writer.set_u32("k", 7);
  writer.add_tensor("w", DType::F16, {2}, {0x11, 0x22, 0x33, 0x44});
  writer.write(path);

  std::vector<uint8_t> expected = {
      'G', 'G', 'U', 'F', 3, 0, 0, 0,  // magic, version 3
      1, 0, 0, 0, 0, 0, 0, 0,          // tensor count
      1, 0, 0, 0, 0, 0, 0, 0,          // kv count
      1, 0, 0, 0, 0, 0, 0, 0, 'k',     // key
      4, 0, 0, 0, 7, 0, 0, 0,          // uint32 7
      1, 0, 0, 0, 0, 0, 0, 0, 'w',     // tensor name
      1, 0, 0, 0,                      // n_dims
      2, 0, 0, 0, 0, 0, 0, 0,          // dims[0]
      1, 0, 0, 0,                      // type F16
      0, 0, 0, 0, 0, 0, 0, 0,          // offset
  };
  expected.resize(96, 0);  // header padded to 32
  for (uint8_t b : {0x11, 0x22, 0x33, 0x44}) expected.push_back(b);
  expected.resize(128, 0);  // the last tensor padded too
  const std::string written = test::read_file(path);
  EXPECT_EQ(std::vector<uint8_t>(written.begin(), written.end()), expected);
}

TEST(GgufWriterTest, TensorsOfSeveralTypesRoundTripAtSeveralAlignments) {
  struct Case {
    std::string name;
    DType type;
    std::vector<int64_t> dims;
    size_t bytes;
  };
  const std::vector<Case> cases = {
      {"f32", DType::F32, {3, 2}, 3 * 2 * 4},
      {"f16", DType::F16, {5}, 5 * 2},
      {"q8_0", DType::Q8_0, {64, 3}, 2 * 3 * 34},  // 34-byte blocks of 32
      {"q4_k", DType::Q4_K, {256, 1, 2}, 2 * 144},  // 144-byte super-blocks of 256
      {"i8", DType::I8, {7, 1, 1, 3}, 21},
  };
  for (const uint32_t alignment : {1u, 8u, 32u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    const std::string dir = test::scratch_dir("gguf_writer_tensors");
    GgufWriter writer(alignment);
    writer.set_string("general.name", "tensors");
    std::vector<std::vector<uint8_t>> data;
    for (size_t i = 0; i < cases.size(); ++i) {
      data.push_back(pattern_bytes(cases[i].bytes, uint8_t(i)));
      writer.add_tensor(cases[i].name, cases[i].type, cases[i].dims, data.back());
    }
    writer.write(dir + "/t.gguf");

    const auto file = GgufFile::open(dir + "/t.gguf");
    EXPECT_EQ(file->alignment(), alignment);
    EXPECT_EQ(file->data_offset() % alignment, 0u);
    if (alignment == kDefaultAlignment) {
      EXPECT_EQ(file->find("general.alignment"), nullptr);
    } else {
      EXPECT_EQ(file->get_uint("general.alignment"), alignment);
    }
    ASSERT_EQ(file->tensors().size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const TensorInfo& t = file->tensors()[i];
      SCOPED_TRACE(t.name);
      EXPECT_EQ(t.name, cases[i].name);
      EXPECT_EQ(t.type, cases[i].type);
      EXPECT_EQ(t.dims, cases[i].dims);
      EXPECT_EQ(t.offset % alignment, 0u);
      ASSERT_EQ(t.num_bytes, cases[i].bytes);
      EXPECT_EQ(std::memcmp(t.data, data[i].data(), t.num_bytes), 0);
    }
  }
}

TEST(GgufWriterTest, EmptyFileRoundTrips) {
  const std::string path = test::scratch_dir("gguf_writer_empty") + "/empty.gguf";
  GgufWriter().write(path);
  const auto file = GgufFile::open(path);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_TRUE(file->metadata().empty());
  EXPECT_TRUE(file->tensors().empty());
}

// Copies every key and tensor of `source` through a GgufWriter into `path`.
void copy_through_writer(const GgufFile& source, const std::string& path) {
  GgufWriter writer(source.alignment());
  for (const KeyValue& kv : source.metadata()) writer.set(kv.key, kv.value);
  for (const TensorInfo& t : source.tensors()) {
    writer.add_tensor_view(t.name, t.type, t.dims, {t.data, size_t(t.num_bytes)});
  }
  writer.write(path);
}

TEST(GgufWriterTest, RewriteOfStories260KIsFaithful) {
  const std::string source_path = test::shared_model_path("stories260K.gguf");
  const std::string path = test::scratch_dir("gguf_writer_rewrite") + "/stories.gguf";
  const auto source = GgufFile::open(source_path);
  copy_through_writer(*source, path);

  const auto copy = GgufFile::open(path);
  EXPECT_EQ(copy->version(), source->version());
  expect_same_metadata(*source, *copy);
  ASSERT_EQ(copy->tensors().size(), source->tensors().size());
  for (size_t i = 0; i < source->tensors().size(); ++i) {
    const TensorInfo& a = source->tensors()[i];
    const TensorInfo& b = copy->tensors()[i];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.type, b.type);
    EXPECT_EQ(a.dims, b.dims);
    EXPECT_EQ(a.offset, b.offset);
    ASSERT_EQ(a.num_bytes, b.num_bytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.num_bytes), 0);
  }
  // The model was written by llama.cpp with the same layout (32-byte alignment, tensors packed in
  // order), so the copy is byte for byte the original.
  EXPECT_TRUE(test::read_file(path) == test::read_file(source_path));
}

TEST(GgufWriterTest, RewriteOfTokenizerOnlyVocabKeepsMetadata) {
  const auto source = GgufFile::open(test::shared_model_path("llama.cpp-vocab/ggml-vocab-gpt-2.gguf"));
  const std::string path = test::scratch_dir("gguf_writer_vocab") + "/gpt2.gguf";
  copy_through_writer(*source, path);
  const auto copy = GgufFile::open(path);
  expect_same_metadata(*source, *copy);
  EXPECT_TRUE(copy->tensors().empty());
}

TEST(GgufWriterTest, RejectsTensorsItCouldNotWriteCorrectly) {
  GgufWriter writer;
  EXPECT_TRUE(contains(error_of([&] { writer.add_tensor("w", DType::F32, {3}, pattern_bytes(11, 0)); }),
                       "tensor 'w': 11 bytes given, 12 expected"));
  EXPECT_TRUE(contains(error_of([&] { writer.add_tensor("q", DType::Q8_0, {64}, pattern_bytes(64, 0)); }),
                       "tensor 'q': 64 bytes given, 68 expected"));
  EXPECT_TRUE(contains(error_of([&] { writer.add_tensor("q", DType::Q8_0, {33}, pattern_bytes(34, 0)); }),
                       "row length 33 is not a multiple of the Q8_0 block size 32"));
  EXPECT_TRUE(contains(error_of([&] { writer.add_tensor("e", DType::F32, {}, {}); }),
                       "tensor 'e': 0 dimensions"));
  EXPECT_TRUE(contains(error_of([&] { writer.add_tensor("e", DType::F32, {1, 1, 1, 1, 1}, pattern_bytes(4, 0)); }),
                       "tensor 'e': 5 dimensions"));
  EXPECT_TRUE(contains(error_of([&] { writer.add_tensor("z", DType::F32, {4, 0}, {}); }),
                       "tensor 'z': dimensions 4 x 0 must be positive"));
  EXPECT_TRUE(contains(error_of([&] { writer.add_tensor("n", DType::F32, {-4, -1}, pattern_bytes(16, 0)); }),
                       "tensor 'n': dimensions -4 x -1 must be positive"));
  EXPECT_TRUE(contains(error_of([&] {
                         writer.add_tensor("big", DType::F32, {int64_t(1) << 32, int64_t(1) << 32}, {});
                       }),
                       "tensor 'big': dimensions 4294967296 x 4294967296 must be positive with at most"));

  writer.add_tensor("w", DType::F32, {3}, pattern_bytes(12, 0));
  EXPECT_TRUE(contains(error_of([&] { writer.add_tensor("w", DType::F32, {1}, pattern_bytes(4, 0)); }),
                       "tensor 'w' added twice"));
}

TEST(GgufWriterTest, RejectsValuesReadersWouldRefuse) {
  GgufWriter writer;
  EXPECT_TRUE(contains(error_of([&] {
                         writer.set("mixed", array_of(ValueType::Int32, {Value::of_i32(1), Value::of_string("x")}));
                       }),
                       "metadata key 'mixed': array of int32 holds a string"));
  Value too_deep = array_of(ValueType::UInt8, {});
  for (int depth = 0; depth < kMaxArrayNesting; ++depth) too_deep = array_of(ValueType::Array, {too_deep});
  EXPECT_TRUE(contains(error_of([&] { writer.set("deep", too_deep); }),
                       "metadata key 'deep': arrays nested more than 8 deep"));
  // The padding follows the constructor's alignment; a different general.alignment would send
  // readers to the wrong tensor data.
  EXPECT_TRUE(contains(error_of([&] { writer.set_u32("general.alignment", 64); }),
                       "general.alignment 64 differs from the writer's alignment 32"));
  EXPECT_TRUE(contains(error_of([&] { writer.set_string("general.alignment", "32"); }),
                       "general.alignment \"32\" differs"));
  writer.set_u32("general.alignment", 32);  // consistent, so accepted

  EXPECT_TRUE(contains(error_of([] { GgufWriter bad(0); }), "power of two between 1 and 65536, got 0"));
  EXPECT_TRUE(contains(error_of([] { GgufWriter bad(3); }), "got 3"));
  EXPECT_TRUE(contains(error_of([] { GgufWriter bad(1u << 17); }), "got 131072"));
}

TEST(GgufWriterTest, UncreatablePathLeavesNothing) {
  const std::string dir = test::scratch_dir("gguf_writer_uncreatable");
  const std::string path = dir + "/missing-dir/out.gguf";
  GgufWriter writer;
  writer.set_u32("k", 1);
  const std::string message = error_of([&] { writer.write(path); });
  EXPECT_TRUE(contains(message, path + ".tmp: cannot create")) << message;
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(GgufWriterTest, FailedRenameRemovesTheTemporaryFile) {
  const std::string dir = test::scratch_dir("gguf_writer_rename");
  // A non-empty directory where the file should go: the .tmp is written, the rename fails.
  const std::string path = dir + "/taken";
  fs::create_directories(path + "/inside");
  GgufWriter writer;
  writer.add_tensor("w", DType::F32, {4}, pattern_bytes(16, 1));
  const std::string message = error_of([&] { writer.write(path); });
  EXPECT_TRUE(contains(message, "cannot rename to " + path)) << message;
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_TRUE(fs::is_directory(path + "/inside"));
}

// RLIMIT_FSIZE makes writes past 1000 bytes fail with EFBIG, like a full disk.
TEST(GgufWriterTest, FailedWriteRemovesTheTemporaryFileAndKeepsTheOldOne) {
  const std::string dir = test::scratch_dir("gguf_writer_full");
  const std::string path = dir + "/model.gguf";
  GgufWriter small;
  small.set_string("general.name", "old");
  small.write(path);
  const std::string old_bytes = test::read_file(path);

  GgufWriter big;
  big.add_tensor("w", DType::F32, {64, 1024}, pattern_bytes(64 * 1024 * 4, 2));
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto saved_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit limited = saved;
  limited.rlim_cur = 1000;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  const std::string message = error_of([&] { big.write(path); });
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, saved_handler);

  EXPECT_TRUE(contains(message, path + ".tmp: write failed") ||
              contains(message, path + ".tmp: close failed"))
      << message;
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(test::read_file(path), old_bytes);
}

}  // namespace
}  // namespace kestrel::gguf
