// Pre-quantized Hugging Face checkpoints (loader/hf_quantized.h) against the reference libraries:
// the fixtures in tests/data/prequant/ (scripts/gen_prequant_fixtures.py) were packed by AutoGPTQ,
// AutoAWQ and compressed-tensors themselves, and reference.json holds the FNV-1a 64 hash of each
// linear layer's weights as the libraries' own readers dequantize them (GPTQModel's dequantizer,
// AutoAWQ's dequantize_gemm, compressed-tensors' decompress) plus transformers' logits on those
// weights. For each fixture, loaded as a folder and after `kestrel convert` to GGUF:
// - every quantized linear dequantizes to exactly the reference's float32 values (hash of the
//   bytes, after undoing Llama's Q/K row permutation and an act-order input order);
// - the layers map to the formats hf_quantized.h promises (INT4_ZP_G*, Q8_0, FP8_E4M3_PC), act-order
//   layers carry an input_order; only FP8 with block scales along the row falls back to F32, and
//   the file says so;
// - the batch logits match transformers'. Tolerance 3e-2 * max|logit|: the weights are exact, but
//   INT4_ZP and Q8_0 dot with activations rounded to 8 bits per block of 32 (up to 1/254 of the
//   block's largest |value| per element); measured 1.0-1.7e-2 on these fixtures (the test prints
//   it), while a wrong nibble order, zero convention or act-order map moves logits by O(max|logit|).
//   That the gap is only the activation rounding is shown by the same weights re-encoded as F32
//   (exact), which match transformers within the float fixtures' 1e-4. (FP8_E4M3_PC and the F32
//   fallback compute with float activations: within 3e-4.)
// And the bad inputs the loader must name: a missing qzeros, a mis-shaped qweight, an unknown
// quant_method.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/hf_convert.h"
#include "convert/requantize.h"
#include "core/error.h"
#include "loader/hf_folder.h"
#include "model/model.h"
#include "quant/format.h"
#include "reference_logits.h"
#include "runner/model_runner.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const char* const kFixtures[] = {"gptq_g128_sym", "gptq_g32_actorder", "gptq_v2_g64_llama", "gptq_8bit_g32",
                                 "gptq_2bit_g64", "awq_g64",           "ct_w4_g32_sym",     "ct_w4_g64_asym",
                                 "ct_fp8_channel", "ct_fp8_block"};

std::string fixture_dir(const std::string& name) { return test::test_data_path("prequant/" + name); }
const json& reference(const std::string& name) { return test::fixture_reference("prequant/" + name); }

uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// "model.layers.0.self_attn.q_proj" -> "blk.0.attn_q".
std::string gguf_base(const std::string& module) {
  static const std::map<std::string, std::string> kNames = {
      {"self_attn.q_proj", "attn_q"},    {"self_attn.k_proj", "attn_k"}, {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"}, {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  const std::string prefix = "model.layers.";
  const size_t dot = module.find('.', prefix.size());
  return "blk." + module.substr(prefix.size(), dot - prefix.size()) + "." + kNames.at(module.substr(dot + 1));
}

// The tensor dequantized to [rows][cols] in the checkpoint's row and column order.
std::vector<float> checkpoint_order_weights(const gguf::GgufFile& file, const std::string& base, bool llama_qk,
                                            int64_t head_dim) {
  const gguf::TensorInfo* t = file.find_tensor(base + ".weight");
  if (t == nullptr) throw Error("missing " + base + ".weight");
  const int64_t cols = t->dims[0], rows = t->dims[1];
  const quant::WeightFormat& f = quant::require_format(t->type);
  std::vector<float> deq(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    f.dequantize_row(t->data + r * quant::row_bytes(f, cols), deq.data() + r * cols, cols);
  }
  std::vector<float> out(deq.size());
  const gguf::TensorInfo* order = file.find_tensor(base + ".input_order");
  for (int64_t r = 0; r < rows; ++r) {
    int64_t src_row = r;  // GGUF row r holds checkpoint row src_row
    if (llama_qk) {
      const int64_t h = r / head_dim, j = r % head_dim;
      src_row = h * head_dim + j / 2 + (j % 2) * (head_dim / 2);
    }
    for (int64_t c = 0; c < cols; ++c) {
      int32_t src_col = int32_t(c);  // GGUF column c reads input src_col
      if (order != nullptr) std::memcpy(&src_col, order->data + 4 * c, 4);
      out[size_t(src_row * cols + src_col)] = deq[size_t(r * cols + c)];
    }
  }
  return out;
}

enum class Source { Folder, Converted };
struct Case {
  std::string name;
  Source source;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name << (c.source == Source::Folder ? " (folder)" : " (GGUF)"); }

std::string path_of(const Case& c) {
  if (c.source == Source::Folder) return fixture_dir(c.name);
  static std::map<std::string, std::string> paths;
  auto it = paths.find(c.name);
  if (it == paths.end()) {
    const std::string path = test::scratch_dir("prequant_" + c.name) + "/model.gguf";
    convert_hf_to_gguf(fixture_dir(c.name), path);
    it = paths.emplace(c.name, path).first;
  }
  return it->second;
}

class Prequantized : public testing::TestWithParam<Case> {};

TEST_P(Prequantized, WeightsDequantizeToTheReferenceBitForBit) {
  const Case& c = GetParam();
  const std::unique_ptr<Model> model = Model::load(path_of(c));
  const gguf::GgufFile& file = model->file();
  const bool llama = c.name.find("llama") != std::string::npos;
  const bool act_order = c.name.find("actorder") != std::string::npos;
  const int64_t head_dim = model->config().head_dim;
  const json& hashes = reference(c.name)["dequantized_fnv1a64"];
  ASSERT_EQ(hashes.size(), 7u);
  for (const auto& [module, hash] : hashes.items()) {
    const std::string base = gguf_base(module);
    SCOPED_TRACE(module + " -> " + base);
    const gguf::TensorInfo* t = file.find_tensor(base + ".weight");
    ASSERT_NE(t, nullptr);
    const int64_t cols = t->dims[0];
    // The promised formats (every fixture layer's groups fall on blocks).
    if (c.name == "gptq_8bit_g32") {
      EXPECT_EQ(t->type, DType::Q8_0);
    } else if (c.name == "ct_fp8_block") {
      EXPECT_EQ(t->type, DType::F32);
    } else if (c.name == "ct_fp8_channel") {
      EXPECT_EQ(t->type, DType::FP8_E4M3_PC);
    } else {
      const int64_t group = reference(c.name)["quantization_config"].contains("config_groups")
                                ? reference(c.name)["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"].get<int64_t>()
                                : reference(c.name)["quantization_config"]["group_size"].get<int64_t>();
      const int64_t block = std::min<int64_t>(std::min<int64_t>(group, cols), 128);
      EXPECT_EQ(t->type, block == 128 ? DType::INT4_ZP_G128 : block == 64 ? DType::INT4_ZP_G64 : DType::INT4_ZP_G32)
          << dtype_name(t->type);
    }
    EXPECT_EQ(file.find_tensor(base + ".input_order") != nullptr, act_order);
    const bool qk = llama && (base.ends_with("attn_q") || base.ends_with("attn_k"));
    const std::vector<float> w = checkpoint_order_weights(file, base, qk, head_dim);
    EXPECT_EQ(fmt::format("{:016x}", fnv1a64(w.data(), w.size() * 4)), hash.get<std::string>());
  }
  const gguf::Value* fallbacks = file.find("kestrel.quantization.fallbacks");
  if (c.name == "ct_fp8_block") {
    ASSERT_NE(fallbacks, nullptr);
    ASSERT_NE(fallbacks->as_array(), nullptr);
    ASSERT_EQ(fallbacks->as_array()->items.size(), 7u);
    EXPECT_NE(fallbacks->as_array()->items[0].as_string()->find("FP8 with block scales along the row"), std::string::npos);
  } else {
    EXPECT_EQ(fallbacks, nullptr) << "no layer should need F32";
  }
  if (c.source == Source::Folder) {
    const gguf::Value* source = file.find("kestrel.quantization.source");
    ASSERT_NE(source, nullptr);
    std::printf("[ %s ] %s\n", c.name.c_str(), source->as_string()->c_str());
  }
}

TEST_P(Prequantized, BatchLogitsMatchTransformersOnTheDequantizedWeights) {
  const Case& c = GetParam();
  const std::unique_ptr<Model> model = Model::load(path_of(c));
  test::expect_batch_logits_match(*model, reference(c.name), c.name, 0, 3e-2);
}

// The same weights as F32 (requantize dequantizes exactly; an input order is kept): float math
// only, so the float fixtures' tolerance.
TEST_P(Prequantized, AsF32MatchesTransformersToFloatRounding) {
  const Case& c = GetParam();
  if (c.source != Source::Converted) GTEST_SKIP() << "the converted GGUF is re-encoded";
  const std::string f32 = test::scratch_dir("prequant_f32_" + c.name) + "/model.gguf";
  requantize_gguf(path_of(c), f32, DType::F32, [](const RequantizeNote&) {});
  const std::unique_ptr<Model> model = Model::load(f32);
  test::expect_batch_logits_match(*model, reference(c.name), c.name + " as F32");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* name : kFixtures) {
    out.push_back({name, Source::Folder});
    out.push_back({name, Source::Converted});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Fixtures, Prequantized, testing::ValuesIn(cases()), [](const auto& info) {
  return info.param.name + (info.param.source == Source::Folder ? "_folder" : "_gguf");
});

// ---------------------------------------------------------------------------------------------
// Bad checkpoints: a copy of a fixture with one thing broken.

std::string broken_copy(const std::string& fixture, const std::string& tag) {
  const fs::path dir = test::scratch_dir("prequant_broken_" + tag);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(fs::path(fixture_dir(fixture)) / f, dir / f, fs::copy_options::overwrite_existing);
  }
  return dir.string();
}

// Rewrites the safetensors header of FOLDER/model.safetensors with `edit` (data kept).
template <class Edit>
void edit_header(const std::string& folder, Edit edit) {
  const std::string path = folder + "/model.safetensors";
  const std::string bytes = test::read_file(path);
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  json header = json::parse(bytes.substr(8, header_size));
  edit(header);
  std::string text = header.dump();
  text.resize(header_size, ' ');  // the same size keeps the data offsets (the edits only shorten)
  ASSERT_EQ(text.size(), header_size);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), 8);
  out.write(text.data(), std::streamsize(text.size()));
  out.write(bytes.data() + 8 + header_size, std::streamsize(bytes.size() - 8 - header_size));
}

std::string load_error(const std::string& folder) {
  try {
    load_hf_folder(folder);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST(PrequantizedErrors, MissingQzerosIsNamed) {
  const std::string dir = broken_copy("gptq_g32_actorder", "qzeros");
  edit_header(dir, [](json& h) { h.erase("model.layers.0.mlp.up_proj.qzeros"); });
  const std::string message = load_error(dir);
  EXPECT_NE(message.find("missing tensor 'model.layers.0.mlp.up_proj.qzeros'"), std::string::npos) << message;
  EXPECT_NE(message.find("GPTQ expects qweight, qzeros, scales"), std::string::npos) << message;
}

TEST(PrequantizedErrors, WrongPackedShapeIsNamedWithTheExpectedOne) {
  const std::string dir = broken_copy("awq_g64", "shape");
  // AWQ's gate_proj qweight is [128 (in), 256 / 8]; the same bytes as [64, 64] are not.
  edit_header(dir, [](json& h) { h["model.layers.0.mlp.gate_proj.qweight"]["shape"] = {64, 64}; });
  const std::string message = load_error(dir);
  EXPECT_NE(message.find("tensor 'model.layers.0.mlp.gate_proj.qweight' is I32 [64, 64]"), std::string::npos) << message;
  EXPECT_NE(message.find("expects I32 [128, 32]"), std::string::npos) << message;
}

TEST(PrequantizedErrors, UnknownQuantMethodIsNamed) {
  const std::string dir = broken_copy("ct_w4_g32_sym", "method");
  json config = json::parse(test::read_file(dir + "/config.json"));
  config["quantization_config"]["quant_method"] = "hqq";
  std::ofstream(dir + "/config.json") << config.dump();
  const std::string message = load_error(dir);
  EXPECT_NE(message.find("quant_method 'hqq' is not supported (gptq, awq, compressed-tensors)"), std::string::npos)
      << message;
}

TEST(PrequantizedErrors, CalibrationOnAnActOrderModelIsRefused) {
  // imatrix / GPTQ / AWQ observe a matrix's input in the model's order; an act-order matrix's
  // columns are permuted, so the statistics would be misplaced: refused, naming the matrix.
  const auto model = Model::load(fixture_dir("gptq_g32_actorder"));
  struct Ignoring : ActivationObserver {
    void observe(int64_t, LinearKind, const float*, int64_t, int64_t) override {}
  } observer;
  try {
    test::run_observed_chunk(*model, observer);
    FAIL() << "an observer ran over act-order matrices";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("act-order matrices (input_order) yet: blk.0.attn_q.weight"), std::string::npos)
        << e.what();
  }
}

TEST(PrequantizedErrors, NullSettingsMeanTheDefaultAndWrongTypesAreNamed) {
  // Uploads in the wild carry "desc_act": null and the like.
  const std::string dir = broken_copy("gptq_g128_sym", "null");
  json config = json::parse(test::read_file(dir + "/config.json"));
  config["quantization_config"]["desc_act"] = nullptr;
  config["quantization_config"]["checkpoint_format"] = nullptr;
  std::ofstream(dir + "/config.json") << config.dump();
  EXPECT_EQ(load_error(dir), "(loaded)");
  config["quantization_config"]["sym"] = "yes";
  std::ofstream(dir + "/config.json") << config.dump();
  const std::string message = load_error(dir);
  EXPECT_NE(message.find("quantization_config key 'sym' must be true or false"), std::string::npos) << message;
  EXPECT_NE(message.find(dir), std::string::npos) << message;
}

TEST(PrequantizedErrors, GptqThreeBitIsRefusedByName) {
  const std::string dir = broken_copy("gptq_g128_sym", "bits");
  json config = json::parse(test::read_file(dir + "/config.json"));
  config["quantization_config"]["bits"] = 3;
  std::ofstream(dir + "/config.json") << config.dump();
  const std::string message = load_error(dir);
  EXPECT_NE(message.find("GPTQ 3-bit is not supported"), std::string::npos) << message;
}

}  // namespace
}  // namespace kestrel
