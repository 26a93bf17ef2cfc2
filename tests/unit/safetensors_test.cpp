// The safetensors reader on files written byte by byte: a valid file reads back exactly, and every
// malformed one (truncated, header past the end, bad JSON, unknown dtype, shape/bytes mismatch,
// offsets out of range, overlapping tensors, ...) is a kestrel::Error naming the file and, where
// there is one, the tensor. Sharded folders (model.safetensors.index.json) too.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "loader/safetensors.h"
#include "test_paths.h"

namespace kestrel::safetensors {
namespace {

using json = nlohmann::json;

// One file's bytes: 8-byte little-endian header length, the header (padded with spaces to a
// multiple of 8, as the reference writer does), then the data.
std::string file_bytes(const std::string& header, const std::string& data, bool pad = true) {
  std::string h = header;
  while (pad && h.size() % 8 != 0) h += ' ';
  const uint64_t length = h.size();
  std::string out(reinterpret_cast<const char*>(&length), 8);
  return out + h + data;
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string floats_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// A valid file: "a" F32 [2, 3], "b" BF16 [4], metadata {"format": "pt"}.
const std::vector<float> kA = {1.0f, -2.0f, 3.5f, 0.25f, -0.125f, 6.0f};
const std::vector<uint16_t> kB = {0x3F80, 0xC000, 0x4040, 0x0000};  // 1, -2, 3, 0 in BF16

json valid_header() {
  return json{{"__metadata__", {{"format", "pt"}}},
              {"a", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
              {"b", {{"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {24, 32}}}}};
}

std::string valid_data() {
  return floats_bytes(kA) + std::string(reinterpret_cast<const char*>(kB.data()), kB.size() * 2);
}

class SafetensorsTest : public testing::Test {
 protected:
  void SetUp() override { dir_ = test::scratch_dir("safetensors"); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // Opening `bytes` must fail with an error containing every one of `needles` and the file name.
  void expect_error(const std::string& name, const std::string& bytes, const std::vector<std::string>& needles) {
    write(path(name), bytes);
    try {
      SafetensorsFile::open(path(name));
      ADD_FAILURE() << name << ": expected an error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(name), std::string::npos) << message;
      for (const std::string& needle : needles) EXPECT_NE(message.find(needle), std::string::npos) << message;
    }
  }

  std::string dir_;
};

TEST_F(SafetensorsTest, ValidFileReadsBack) {
  write(path("ok.safetensors"), file_bytes(valid_header().dump(), valid_data()));
  const auto file = SafetensorsFile::open(path("ok.safetensors"));
  ASSERT_EQ(file->tensors().size(), 2u);
  EXPECT_EQ(file->metadata().at("format"), "pt");

  const Tensor* a = file->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, "F32");
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->num_elements(), 6);
  EXPECT_EQ(a->num_bytes, 24u);
  EXPECT_EQ(a->float_type(), DType::F32);
  std::vector<float> values(6);
  std::memcpy(values.data(), a->data, 24);
  EXPECT_EQ(values, kA);

  const Tensor* b = file->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->float_type(), DType::BF16);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(std::memcmp(b->data, kB.data(), 8), 0);
  EXPECT_EQ(file->find("c"), nullptr);
}

TEST_F(SafetensorsTest, UnpaddedHeaderAndScalarAndEmptyTensorsAreValid) {
  const json header = {{"s", {{"dtype", "F32"}, {"shape", json::array()}, {"data_offsets", {0, 4}}}},
                       {"e", {{"dtype", "F16"}, {"shape", {0, 3}}, {"data_offsets", {4, 4}}}},
                       {"i", {{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {4, 12}}}}};
  write(path("scalar.safetensors"), file_bytes(header.dump(), std::string(12, '\0'), /*pad=*/false));
  const auto file = SafetensorsFile::open(path("scalar.safetensors"));
  EXPECT_EQ(file->find("s")->num_elements(), 1);
  EXPECT_EQ(file->find("e")->num_bytes, 0u);
  EXPECT_EQ(file->find("i")->float_type(), std::nullopt);
}

TEST_F(SafetensorsTest, FileShorterThanTheHeaderLength) {
  expect_error("short.safetensors", "abc", {"too short"});
  expect_error("empty.safetensors", "", {});
}

TEST_F(SafetensorsTest, TruncatedData) {
  const std::string full = file_bytes(valid_header().dump(), valid_data());
  expect_error("truncated.safetensors", full.substr(0, full.size() - 5), {"'b'", "truncated"});
}

TEST_F(SafetensorsTest, HeaderLengthPastTheEnd) {
  const std::string full = file_bytes(valid_header().dump(), valid_data());
  std::string bytes = full;
  const uint64_t length = full.size();  // more than the bytes after the length field
  std::memcpy(bytes.data(), &length, 8);
  expect_error("header_past_end.safetensors", bytes, {"header claims"});
  const uint64_t absurd = uint64_t(1) << 62;
  std::memcpy(bytes.data(), &absurd, 8);
  expect_error("header_absurd.safetensors", bytes, {"header length"});
}

TEST_F(SafetensorsTest, BadJsonHeader) {
  expect_error("bad_json.safetensors", file_bytes("{\"a\": {\"dtype\": \"F32\",", ""), {"not valid JSON"});
  expect_error("not_object.safetensors", file_bytes("[1, 2]", ""), {"JSON object"});
  expect_error("missing_fields.safetensors", file_bytes(R"({"w": {"dtype": "F32", "shape": [1]}})", "abcd"),
               {"'w'", "data_offsets"});
  expect_error("bad_metadata.safetensors", file_bytes(R"({"__metadata__": {"k": 1}})", ""), {"__metadata__"});
}

TEST_F(SafetensorsTest, UnknownDtype) {
  const json header = {{"w", {{"dtype", "F12"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}};
  expect_error("dtype.safetensors", file_bytes(header.dump(), std::string(8, '\0')), {"'w'", "F12"});
}

TEST_F(SafetensorsTest, ShapeDisagreesWithTheByteRange) {
  const json header = {{"w", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 20}}}}};
  expect_error("shape.safetensors", file_bytes(header.dump(), std::string(24, '\0')), {"'w'", "20 bytes", "need 24"});
  const json negative = {{"w", {{"dtype", "F32"}, {"shape", {-2}}, {"data_offsets", {0, 8}}}}};
  expect_error("negative_dim.safetensors", file_bytes(negative.dump(), std::string(8, '\0')), {"'w'", "dimension"});
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  const json past = {{"w", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {8, 24}}}}};
  expect_error("offsets_past.safetensors", file_bytes(past.dump(), std::string(16, '\0')), {"'w'", "past the end"});
  const json reversed = {{"w", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 4}}}}};
  expect_error("offsets_reversed.safetensors", file_bytes(reversed.dump(), std::string(16, '\0')), {"'w'"});
  const json negative = {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {-4, 0}}}}};
  expect_error("offsets_negative.safetensors", file_bytes(negative.dump(), std::string(16, '\0')),
               {"'w'", "data_offsets"});
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  const json header = {{"first", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
                       {"second", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}};
  expect_error("overlap.safetensors", file_bytes(header.dump(), std::string(16, '\0')),
               {"overlap", "'first'", "'second'"});
}

// A folder sharded by model.safetensors.index.json.
TEST_F(SafetensorsTest, ShardedFolder) {
  const json h1 = {{"x", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}};
  const json h2 = {{"y", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  write(path("model-00001-of-00002.safetensors"), file_bytes(h1.dump(), floats_bytes({1.0f, 2.0f})));
  write(path("model-00002-of-00002.safetensors"), file_bytes(h2.dump(), floats_bytes({3.0f})));
  const json index = {{"metadata", {{"total_size", 12}}},
                      {"weight_map", {{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00002-of-00002.safetensors"}}}};
  write(path("model.safetensors.index.json"), index.dump());
  const auto model = SafetensorsModel::open_folder(dir_);
  EXPECT_EQ(model->names(), (std::vector<std::string>{"x", "y"}));
  float y = 0;
  std::memcpy(&y, model->find("y")->data, 4);
  EXPECT_EQ(y, 3.0f);
}

TEST_F(SafetensorsTest, FolderErrorsNameTheFile) {
  // No safetensors at all.
  try {
    SafetensorsModel::open_folder(dir_);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no *.safetensors"), std::string::npos) << e.what();
  }
  // The same tensor in two shards.
  const json h = {{"x", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  write(path("a.safetensors"), file_bytes(h.dump(), floats_bytes({1.0f})));
  write(path("b.safetensors"), file_bytes(h.dump(), floats_bytes({2.0f})));
  try {
    SafetensorsModel::open_folder(dir_);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x' appears in more than one shard"), std::string::npos) << e.what();
  }
  // An index naming a shard that is not there.
  write(path("model.safetensors.index.json"), R"({"weight_map": {"x": "missing.safetensors"}})");
  try {
    SafetensorsModel::open_folder(dir_);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.safetensors"), std::string::npos) << e.what();
  }
  // An index that is not JSON.
  write(path("model.safetensors.index.json"), "{ nope");
  try {
    SafetensorsModel::open_folder(dir_);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors.index.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel::safetensors
