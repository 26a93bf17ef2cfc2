// GgufFile on real files: the stories260K model and a tokenizer-only vocab file from llama.cpp.
// Expected values were taken from the files' headers (the kv count is the header's field, not
// the GGUF.* pseudo-keys some tools list).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "test_paths.h"

namespace kestrel::gguf {
namespace {

const std::string kStories = test::shared_model_path("stories260K.gguf");
const std::string kGpt2Vocab = test::shared_model_path("llama.cpp-vocab/ggml-vocab-gpt-2.gguf");
const std::string kSpmVocab = test::shared_model_path("llama.cpp-vocab/ggml-vocab-llama-spm.gguf");

std::vector<uint8_t> file_bytes(const std::string& path) {
  const std::string s = test::read_file(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

const std::string& string_item(const Array& array, size_t i) {
  const std::string* s = array.items.at(i).as_string();
  if (s == nullptr) throw std::runtime_error("array item is not a string");
  return *s;
}

TEST(GgufReaderTest, Stories260KHeader) {
  const auto file = GgufFile::open(kStories);
  EXPECT_EQ(file->name(), kStories);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->tensors().size(), 48u);
  EXPECT_EQ(file->metadata().size(), 19u);
  EXPECT_EQ(file->alignment(), 32u);
  // The tensor infos end at 14152; the data section starts at the next multiple of 32.
  EXPECT_EQ(file->data_offset(), 14176u);
}

TEST(GgufReaderTest, Stories260KMetadata) {
  const auto file = GgufFile::open(kStories);
  EXPECT_EQ(file->require_string("general.architecture"), "llama");
  EXPECT_EQ(file->require_uint("llama.embedding_length"), 64u);
  EXPECT_EQ(file->require_uint("llama.block_count"), 5u);
  EXPECT_EQ(file->require_uint("llama.feed_forward_length"), 172u);
  EXPECT_EQ(file->require_uint("llama.attention.head_count_kv"), 4u);
  EXPECT_FLOAT_EQ(float(file->require_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  // Key order is the file's order.
  EXPECT_EQ(file->metadata().front().key, "tokenizer.ggml.tokens");
  EXPECT_EQ(file->metadata().back().key, "llama.attention.layer_norm_rms_epsilon");

  const Array* tokens = file->get_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->element_type, ValueType::String);
  ASSERT_EQ(tokens->items.size(), 512u);
  EXPECT_EQ(string_item(*tokens, 0), "<unk>");
  EXPECT_EQ(string_item(*tokens, 1), "<s>");
  EXPECT_EQ(string_item(*tokens, 2), "</s>");

  const Array* scores = file->get_array("tokenizer.ggml.scores");
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(scores->element_type, ValueType::Float32);
  EXPECT_EQ(scores->items.size(), 512u);
  const Array* token_types = file->get_array("tokenizer.ggml.token_type");
  ASSERT_NE(token_types, nullptr);
  EXPECT_EQ(token_types->element_type, ValueType::Int32);
  EXPECT_EQ(token_types->items.at(1).as_int(), 3);  // <s> is a control token
  // uint32 0xFFFFFFFF (llama.cpp's "no token") must come through unsigned.
  EXPECT_EQ(file->get_uint("tokenizer.ggml.padding_token_id"), 0xFFFFFFFFu);
}

TEST(GgufReaderTest, TypedGettersReportMissingAndMistypedKeys) {
  const auto file = GgufFile::open(kStories);
  EXPECT_EQ(file->find("no.such.key"), nullptr);
  EXPECT_EQ(file->get_string("no.such.key"), std::nullopt);
  EXPECT_EQ(file->get_uint("no.such.key"), std::nullopt);
  EXPECT_EQ(file->get_array("no.such.key"), nullptr);
  try {
    file->require_uint("no.such.key");
    ADD_FAILURE() << "require_uint of a missing key did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("required metadata key 'no.such.key' is missing"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(kStories), std::string::npos) << e.what();
  }
  try {
    file->get_uint("general.architecture");
    ADD_FAILURE() << "get_uint of a string did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'general.architecture' should be a non-negative integer"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(file->get_string("llama.block_count"), Error);
  EXPECT_THROW(file->get_array("general.name"), Error);
  EXPECT_THROW(file->get_bool("llama.block_count"), Error);
  EXPECT_THROW(file->get_float("tokenizer.ggml.tokens"), Error);
}

TEST(GgufReaderTest, Stories260KTensorInfos) {
  const auto file = GgufFile::open(kStories);
  const TensorInfo* embd = file->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(embd->type, DType::F32);
  EXPECT_EQ(embd->offset, 0u);
  EXPECT_EQ(embd->num_elements, 64 * 512);
  EXPECT_EQ(embd->num_bytes, 64u * 512u * 4u);
  EXPECT_EQ(embd->rows(), 512);

  const TensorInfo* down = file->find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dims, (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(down->type, DType::F32);
  EXPECT_EQ(down->rows(), 64);

  const TensorInfo* norm = file->find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dims, (std::vector<int64_t>{64}));
  EXPECT_EQ(norm->rows(), 1);
  EXPECT_EQ(file->find_tensor("blk.5.ffn_down.weight"), nullptr);
  EXPECT_EQ(file->tensors().back().name, "blk.4.ffn_norm.weight");
}

TEST(GgufReaderTest, Stories260KTensorDataPointsIntoTheFile) {
  const auto file = GgufFile::open(kStories);
  const std::vector<uint8_t> bytes = file_bytes(kStories);
  uint64_t end_of_last = 0;
  for (const TensorInfo& t : file->tensors()) {
    SCOPED_TRACE(t.name);
    ASSERT_NE(t.data, nullptr);
    EXPECT_EQ(t.offset % file->alignment(), 0u);
    const uint64_t start = file->data_offset() + t.offset;
    ASSERT_LE(start + t.num_bytes, bytes.size());
    // Same bytes as at that place in the file: the pointer is into the mapping, not a copy of
    // something else.
    EXPECT_EQ(std::memcmp(t.data, bytes.data() + start, t.num_bytes), 0);
    EXPECT_EQ(t.data - file->tensors().front().data, int64_t(t.offset));
    end_of_last = std::max(end_of_last, start + t.num_bytes);
  }
  EXPECT_EQ(end_of_last, bytes.size());

  // Weights of a trained model are finite.
  const TensorInfo* norm = file->find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  for (int64_t i = 0; i < norm->num_elements; ++i) {
    float w;
    std::memcpy(&w, norm->data + 4 * i, 4);
    EXPECT_TRUE(std::isfinite(w)) << i;
  }
}

TEST(GgufReaderTest, ParseOfCallerBytesPointsIntoThoseBytes) {
  const std::vector<uint8_t> bytes = file_bytes(kStories);
  const auto file = GgufFile::parse(bytes, "in-memory");
  EXPECT_EQ(file->name(), "in-memory");
  ASSERT_EQ(file->tensors().size(), 48u);
  for (const TensorInfo& t : file->tensors()) {
    EXPECT_EQ(t.data, bytes.data() + file->data_offset() + t.offset) << t.name;
  }
}

TEST(GgufReaderTest, Gpt2VocabHasNoTensors) {
  const auto file = GgufFile::open(kGpt2Vocab);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_EQ(file->metadata().size(), 16u);
  EXPECT_EQ(file->require_string("general.architecture"), "gpt2");
  EXPECT_EQ(file->require_string("tokenizer.ggml.model"), "gpt2");

  const Array* merges = file->get_array("tokenizer.ggml.merges");
  ASSERT_NE(merges, nullptr);
  EXPECT_EQ(merges->element_type, ValueType::String);
  ASSERT_EQ(merges->items.size(), 50000u);
  EXPECT_EQ(string_item(*merges, 0), "\xC4\xA0 t");  // "Ġ t": byte-level BPE spells space as Ġ
  EXPECT_EQ(string_item(*merges, 2), "h e");
  const Array* tokens = file->get_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->items.size(), 50257u);
  EXPECT_EQ(string_item(*tokens, 0), "!");
  EXPECT_EQ(file->require_uint("tokenizer.ggml.eos_token_id"), 50256u);
}

TEST(GgufReaderTest, SpmVocabBools) {
  const auto file = GgufFile::open(kSpmVocab);
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_EQ(file->metadata().size(), 22u);
  EXPECT_EQ(file->get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(file->get_bool("tokenizer.ggml.add_eos_token"), false);
  const Array* tokens = file->get_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->items.size(), 32000u);
}

TEST(GgufReaderTest, DisplayStringsOfRealValues) {
  const auto file = GgufFile::open(kStories);
  EXPECT_EQ(value_to_display_string(*file->find("general.architecture")), "\"llama\"");
  EXPECT_EQ(value_to_display_string(*file->find("llama.block_count")), "5");
  EXPECT_EQ(value_to_display_string(*file->find("tokenizer.ggml.tokens"), 2),
            "[512 x string: \"<unk>\", \"<s>\", ...]");
}

}  // namespace
}  // namespace kestrel::gguf
