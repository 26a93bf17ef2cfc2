// Hugging Face folders that are wrong in one way each (a missing config key, an unknown
// architecture, a tensor whose shape disagrees with the config, a missing tensor, no tokenizer.json,
// ...): loading must be a kestrel::Error whose message names the file and the key or tensor. The
// folders are a tiny Llama (hidden 8, one layer) written here; the valid one loads.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/hf_convert.h"
#include "core/error.h"
#include "model/model.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct FolderSpec {
  json config = {{"architectures", {"LlamaForCausalLM"}},
                 {"hidden_size", 8},
                 {"num_hidden_layers", 1},
                 {"num_attention_heads", 2},
                 {"num_key_value_heads", 1},
                 {"intermediate_size", 16},
                 {"vocab_size", 4},
                 {"rms_norm_eps", 1e-5},
                 {"max_position_embeddings", 64},
                 {"tie_word_embeddings", true}};
  int64_t tensor_hidden = 8;          // the hidden size the tensors are written with
  std::set<std::string> drop;         // tensors left out
  std::map<std::string, std::string> dtype;  // tensors written with another dtype (same bytes)
  bool tokenizer = true;
  size_t header_padding = 8;          // the header is padded to a multiple of this
};

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), std::streamsize(text.size()));
}

// Writes config.json, model.safetensors (F32 zeros, shapes from tensor_hidden) and tokenizer.json.
void write_folder(const std::string& dir, const FolderSpec& spec) {
  write_text(fs::path(dir) / "config.json", spec.config.dump(2));
  const int64_t h = spec.tensor_hidden, ff = 16, vocab = 4, head_dim = h / 2;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"model.embed_tokens.weight", {vocab, h}},
      {"model.norm.weight", {h}},
      {"model.layers.0.input_layernorm.weight", {h}},
      {"model.layers.0.self_attn.q_proj.weight", {h, h}},
      {"model.layers.0.self_attn.k_proj.weight", {head_dim, h}},
      {"model.layers.0.self_attn.v_proj.weight", {head_dim, h}},
      {"model.layers.0.self_attn.o_proj.weight", {h, h}},
      {"model.layers.0.post_attention_layernorm.weight", {h}},
      {"model.layers.0.mlp.gate_proj.weight", {ff, h}},
      {"model.layers.0.mlp.up_proj.weight", {ff, h}},
      {"model.layers.0.mlp.down_proj.weight", {h, ff}},
  };
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, shape] : shapes) {
    if (spec.drop.count(name) != 0) continue;
    uint64_t bytes = 4;
    for (int64_t d : shape) bytes *= uint64_t(d);
    const auto type = spec.dtype.find(name);
    header[name] = {{"dtype", type == spec.dtype.end() ? "F32" : type->second},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % spec.header_padding != 0) text += ' ';
  if (spec.header_padding == 1 && text.size() % 2 == 0) text += ' ';  // no padding: make it odd
  const uint64_t length = text.size();
  write_text(fs::path(dir) / "model.safetensors",
             std::string(reinterpret_cast<const char*>(&length), 8) + text + std::string(offset, '\0'));
  if (spec.tokenizer) {
    const json tokenizer = {
        {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}}},
        {"added_tokens", {{{"id", 3}, {"content", "<|end|>"}, {"special", true}}}}};
    write_text(fs::path(dir) / "tokenizer.json", tokenizer.dump());
  }
}

class HfFolderErrors : public testing::Test {
 protected:
  void SetUp() override { dir_ = test::scratch_dir("hf_folder_errors"); }

  // Loading the folder written from `spec` must fail with an error containing every needle.
  void expect_error(const FolderSpec& spec, const std::vector<std::string>& needles) {
    write_folder(dir_, spec);
    try {
      Model::load(dir_);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      const std::string message = e.what();
      for (const std::string& needle : needles) EXPECT_NE(message.find(needle), std::string::npos) << message;
    }
  }

  std::string dir_;
};

TEST_F(HfFolderErrors, ValidFolderLoads) {
  write_folder(dir_, FolderSpec());
  const auto model = Model::load(dir_);
  EXPECT_EQ(model->config().architecture, "llama");
  EXPECT_EQ(model->config().n_embd, 8);
  EXPECT_EQ(model->config().n_head_kv, 1);
  EXPECT_EQ(model->config().n_vocab, 4);
  EXPECT_TRUE(model->weights().tied_output);
}

// A header that is not padded leaves the F32 data misaligned; the loader copies such tensors.
TEST_F(HfFolderErrors, UnpaddedSafetensorsHeaderStillLoadsAligned) {
  FolderSpec spec;
  spec.header_padding = 1;
  write_folder(dir_, spec);
  const auto model = Model::load(dir_);
  const LayerWeights& l = model->weights().layers[0];
  for (const void* data : {model->weights().token_embd.data, l.wq.data, l.wk.data, l.wv.data, l.wo.data,
                           l.w_gate.data, l.w_up.data, l.w_down.data}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % alignof(float), 0u);
  }
}

TEST_F(HfFolderErrors, MissingConfigKey) {
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"}) {
    FolderSpec spec;
    spec.config.erase(key);
    expect_error(spec, {"config.json", std::string("missing config key '") + key + "'"});
  }
  FolderSpec no_architectures;
  no_architectures.config.erase("architectures");
  expect_error(no_architectures, {"config.json", "'architectures'"});
}

TEST_F(HfFolderErrors, ConfigValueOfTheWrongType) {
  FolderSpec spec;
  spec.config["hidden_size"] = "8";
  expect_error(spec, {"config.json", "'hidden_size'", "positive integer"});
  spec.config["hidden_size"] = -8;
  expect_error(spec, {"config.json", "'hidden_size'", "positive integer"});
}

TEST_F(HfFolderErrors, ConfigIsNotJson) {
  write_folder(dir_, FolderSpec());
  write_text(fs::path(dir_) / "config.json", "{\"architectures\": [");
  try {
    Model::load(dir_);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
}

TEST_F(HfFolderErrors, UnknownArchitecture) {
  FolderSpec spec;
  spec.config["architectures"] = {"GPT2LMHeadModel"};
  expect_error(spec, {"config.json", "unknown architecture 'GPT2LMHeadModel'", "LlamaForCausalLM"});
}

TEST_F(HfFolderErrors, UnsupportedRopeScaling) {
  FolderSpec spec;
  spec.config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error(spec, {"config.json", "rope_scaling type 'yarn'"});
}

// The config says hidden 64; the tensors are 32 wide.
TEST_F(HfFolderErrors, TensorShapeDisagreesWithTheConfig) {
  FolderSpec spec;
  spec.config["hidden_size"] = 64;
  spec.tensor_hidden = 32;
  expect_error(spec, {dir_, "'model.embed_tokens.weight'", "[4, 32]", "[4, 64]"});
}

TEST_F(HfFolderErrors, MissingTensor) {
  FolderSpec spec;
  spec.drop = {"model.layers.0.mlp.up_proj.weight"};
  expect_error(spec, {dir_, "missing tensor 'model.layers.0.mlp.up_proj.weight'"});
}

TEST_F(HfFolderErrors, TensorOfANonFloatDtype) {
  FolderSpec spec;
  spec.dtype["model.layers.0.self_attn.v_proj.weight"] = "I32";
  expect_error(spec, {"'model.layers.0.self_attn.v_proj.weight'", "dtype I32"});
}

TEST_F(HfFolderErrors, MissingTokenizer) {
  FolderSpec spec;
  spec.tokenizer = false;
  expect_error(spec, {dir_, "missing tokenizer.json"});
}

TEST_F(HfFolderErrors, UnsupportedTokenizerModel) {
  write_folder(dir_, FolderSpec());
  write_text(fs::path(dir_) / "tokenizer.json", R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})");
  try {
    Model::load(dir_);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'Unigram'"), std::string::npos) << e.what();
  }
}

TEST_F(HfFolderErrors, TruncatedSafetensors) {
  write_folder(dir_, FolderSpec());
  const fs::path weights = fs::path(dir_) / "model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) - 100);
  try {
    Model::load(dir_);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

// `kestrel convert` reports the same error and leaves no output behind.
TEST_F(HfFolderErrors, ConvertFailsCleanly) {
  FolderSpec spec;
  spec.drop = {"model.norm.weight"};
  write_folder(dir_, spec);
  const std::string out = test::scratch_dir("hf_folder_errors_out") + "/out.gguf";
  try {
    convert_hf_to_gguf(dir_, out);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'model.norm.weight'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace kestrel
