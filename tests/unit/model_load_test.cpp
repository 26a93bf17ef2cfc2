// Loading a model: hyper-parameters from metadata, and a clear error (naming the file and what is
// wrong) for every inconsistent or unsupported file — never a crash.
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "model/model.h"
#include "gguf_edit.h"
#include "model_load_error.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::string stories() { return test::shared_model_path("stories260K.gguf"); }

// Copies stories260K.gguf through the writer, letting `edit_key` drop/replace metadata and
// `edit_tensor` drop/replace tensors (return false to drop).
std::string mutated_copy(const std::string& name, const test::KeyEdit& edit_key, const test::TensorEdit& edit_tensor) {
  return test::edited_gguf_copy(stories(), "model_load_" + name, edit_key, edit_tensor);
}

auto keep_key = test::keep_key;
auto keep_tensor = test::keep_tensor;

using test::expect_load_error;

TEST(ModelLoad, ReadsStoriesHyperParameters) {
  const auto model = Model::load(stories());
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_EQ(c.n_ctx_train, 2048);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FALSE(c.rope_neox);
  EXPECT_FALSE(model->weights().tied_output) << "stories260K.gguf stores output.weight";
  EXPECT_EQ(model->parameter_count(), 512 * 64 * 2 + 64 + 5 * (64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 172 + 2 * 64));
  // K and V per layer: 4 KV heads of 8 values, F32 (4 bytes) or F16 (2).
  EXPECT_EQ(model->kv_spec(DType::F32, DType::F32).token_bytes(), 32 * 4 * 2);
  EXPECT_EQ(model->kv_spec().token_bytes(), 32 * 2 * 2);
}

TEST(ModelLoad, MissingOutputTensorMeansTiedEmbedding) {
  const auto path = mutated_copy("tied", keep_key, [](gguf::TensorInfo& t, std::vector<uint8_t>&) {
    return t.name != "output.weight";
  });
  const auto model = Model::load(path);
  EXPECT_TRUE(model->weights().tied_output);
  EXPECT_EQ(model->weights().output.data, model->weights().token_embd.data);
}

TEST(ModelLoad, UnknownArchitecture) {
  const auto path = mutated_copy("arch", [](const std::string& key, gguf::Value& v) {
    if (key == "general.architecture") v = gguf::Value::of_string("mamba9");
    return true;
  }, keep_tensor);
  expect_load_error(path, {"unknown architecture 'mamba9'"});
}

TEST(ModelLoad, MissingHyperParameter) {
  const auto path = mutated_copy("key", [](const std::string& key, gguf::Value&) {
    return key != "llama.block_count";
  }, keep_tensor);
  expect_load_error(path, {"llama.block_count", "missing"});
}

TEST(ModelLoad, WrongTypeForHyperParameter) {
  const auto path = mutated_copy("keytype", [](const std::string& key, gguf::Value& v) {
    if (key == "llama.embedding_length") v = gguf::Value::of_string("sixty-four");
    return true;
  }, keep_tensor);
  expect_load_error(path, {"llama.embedding_length", "should be a non-negative integer"});
}

TEST(ModelLoad, HeadCountsMustDivide) {
  const auto path = mutated_copy("heads", [](const std::string& key, gguf::Value& v) {
    if (key == "llama.attention.head_count_kv") v = gguf::Value::of_u32(3);
    return true;
  }, keep_tensor);
  expect_load_error(path, {"not a multiple of attention.head_count_kv 3"});
}

TEST(ModelLoad, MissingTensor) {
  const auto path = mutated_copy("tensor", keep_key, [](gguf::TensorInfo& t, std::vector<uint8_t>&) {
    return t.name != "blk.3.ffn_up.weight";
  });
  expect_load_error(path, {"missing tensor 'blk.3.ffn_up.weight'"});
}

TEST(ModelLoad, MisShapedTensor) {
  const auto path = mutated_copy("shape", keep_key, [](gguf::TensorInfo& t, std::vector<uint8_t>&) {
    if (t.name == "blk.1.attn_k.weight") t.dims = {32, 64};  // transposed
    return true;
  });
  expect_load_error(path, {"blk.1.attn_k.weight", "should have shape [64, 32]", "[32, 64]"});
}

TEST(ModelLoad, VocabularySizeMustMatchEmbedding) {
  const auto path = mutated_copy("vocab", [](const std::string& key, gguf::Value& v) {
    if (key == "tokenizer.ggml.tokens") {
      auto items = v.as_array()->items;
      items.pop_back();
      v = gguf::Value::of_array(gguf::ValueType::String, std::move(items));
    }
    return true;
  }, keep_tensor);
  expect_load_error(path, {"vocabulary has 511 tokens", "512 rows"});
}

TEST(ModelLoad, UnsupportedWeightTypeIsNamed) {
  // Re-label a 64x64 F32 matrix (16 KiB) as Q4_K: 64 * 64 / 256 * 144 = 2304 bytes.
  const auto path = mutated_copy("qtype", keep_key, [](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
    if (t.name == "blk.0.attn_q.weight") {
      t.dims = {256, 16};
      t.type = DType::Q4_K;
      bytes.resize(16 * 144);
    }
    return true;
  });
  expect_load_error(path, {"blk.0.attn_q.weight"});
}

// --mmap / --no-mmap and the default between them: in memory when the file takes at most half the
// available memory and the whole file is wanted.
TEST(ModelLoad, WeightMemoryChoice) {
  const int64_t gib = int64_t(1) << 30;
  EXPECT_EQ(choose_residency(WeightMemory::Auto, 4 * gib, 8 * gib, true), FileResidency::Copied);
  EXPECT_EQ(choose_residency(WeightMemory::Auto, 4 * gib + 1, 8 * gib, true), FileResidency::Mapped);
  EXPECT_EQ(choose_residency(WeightMemory::Auto, 1, 8 * gib, false), FileResidency::Mapped) << "a shard or a layer-by-layer read";
  EXPECT_EQ(choose_residency(WeightMemory::Auto, 1, 0, true), FileResidency::Mapped) << "available memory unknown";
  EXPECT_EQ(choose_residency(WeightMemory::InMemory, 8 * gib, gib, false), FileResidency::Copied);
  EXPECT_EQ(choose_residency(WeightMemory::Mapped, 1, 8 * gib, true), FileResidency::Mapped);
  const auto small = Model::load(stories());  // 1 MB: in memory by default
  EXPECT_TRUE(small->weights_in_memory());
  const auto layer_by_layer = Model::load(stories(), {}, {.prefault = false});
  EXPECT_FALSE(layer_by_layer->weights_in_memory());
}

TEST(ModelLoad, NonexistentFileInMemory) {
  const std::string missing = "/nonexistent/model.gguf";
  try {
    Model::load(missing, {}, {.weights = WeightMemory::InMemory});
    FAIL() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

TEST(ModelLoad, NonexistentFile) {
  expect_load_error("/nonexistent/model.gguf", {"cannot open"});
}

}  // namespace
}  // namespace kestrel
