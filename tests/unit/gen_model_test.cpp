// Synthetic models (kestrel gen-model): the tiny preset in F32/F16/Q8_0 loads with the right shapes
// and metadata, its weights have std 0.02, it generates tokens, the file depends only on the seed;
// the Llama 3 vocabulary it writes tokenizes exactly as tiktoken (llama.cpp's test vectors and
// words made of random tokens); preset shapes match the real models' parameter counts; and the
// CLI's gen-model and bench run end to end.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/gen_model.h"
#include "convert/gen_vocab.h"
#include "core/error.h"
#include "engine/engine.h"
#include "loader/gguf_reader.h"
#include "quant/format.h"
#include "test_paths.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

std::string write_model(const std::string& preset, const std::string& type, const std::string& path,
                     uint64_t seed = 0, int threads = 2) {
  GenModelOptions o;
  o.preset = preset;
  o.type = type;
  o.output = path;
  o.seed = seed;
  o.num_threads = threads;
  o.llama3_tiktoken = test::shared_model_path("llama3/tokenizer.model");
  o.spm_vocab_gguf = test::shared_model_path("llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
  generate_model(o);
  return path;
}

// Mean and std of a tensor's values, dequantized.
std::pair<double, double> tensor_moments(const gguf::TensorInfo& t) {
  const quant::WeightFormat& format = quant::require_format(t.type);
  const int64_t n = t.dims[0];
  const int64_t row_bytes = quant::row_bytes(format, n);
  std::vector<float> row(static_cast<size_t>(n));
  double sum = 0.0, sum2 = 0.0;
  for (int64_t r = 0; r < t.rows(); ++r) {
    format.dequantize_row(t.data + r * row_bytes, row.data(), n);
    for (const float x : row) {
      sum += x;
      sum2 += double(x) * x;
    }
  }
  const double count = double(t.num_elements);
  const double mean = sum / count;
  return {mean, std::sqrt(sum2 / count - mean * mean)};
}

class GenModelTiny : public ::testing::TestWithParam<const char*> {};

TEST_P(GenModelTiny, LoadsWithShapesMetadataStatisticsAndGenerates) {
  const std::string type = GetParam();
  const std::string path = write_model("tiny", type, test::scratch_dir("gen_tiny_" + type) + "/m.gguf");
  const auto model = Model::load(path);
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.n_vocab, 32000);
  EXPECT_EQ(c.n_embd, 256);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_ff, 768);
  EXPECT_EQ(c.n_ctx_train, 2048);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FALSE(model->weights().tied_output);
  EXPECT_EQ(model->weights().rope_freq_factors, nullptr);
  EXPECT_EQ(model->parameter_count(), find_model_preset("tiny")->parameter_count());
  EXPECT_EQ(model->file().get_string("kestrel.synthetic.preset"), "tiny");

  const DType want = *dtype_from_name(type);
  for (const gguf::TensorInfo& t : model->file().tensors()) {
    EXPECT_EQ(t.type, t.dims.size() == 1 ? DType::F32 : want) << t.name;
  }
  for (const float* norm : {model->weights().output_norm, model->weights().layers[1].ffn_norm}) {
    for (int64_t i = 0; i < c.n_embd; ++i) ASSERT_EQ(norm[i], 1.0f);
  }
  for (const char* name : {"token_embd.weight", "blk.0.ffn_up.weight", "blk.1.attn_k.weight"}) {
    const auto [mean, std] = tensor_moments(*model->file().find_tensor(name));
    EXPECT_NEAR(mean, 0.0, 0.001) << name;
    EXPECT_NEAR(std, 0.02, 0.0005) << name;
  }

  // The SentencePiece vocabulary was copied, and the model generates.
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  EXPECT_EQ(tokenizer->vocab_size(), 32000);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EngineConfig config;
  config.num_threads = 2;
  config.num_kv_blocks = 8;
  config.max_model_len = 128;
  LLMEngine engine(*model, config, tokenizer->stop_token_ids());
  RequestSpec spec;
  spec.prompt = tokenizer->encode("Hello world", true, false);
  spec.max_tokens = 8;
  spec.ignore_eos = true;
  spec.sampling.temperature = 0.0f;
  engine.add_request(spec);
  int64_t generated = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      for (const SampleResult& s : out.new_tokens) {
        EXPECT_GE(s.token, 0);
        EXPECT_LT(s.token, 32000);
        ++generated;
      }
    }
  }
  EXPECT_EQ(generated, 8);
}

INSTANTIATE_TEST_SUITE_P(Types, GenModelTiny, ::testing::Values("F32", "F16", "Q8_0"));

TEST(GenModel, FileDependsOnSeedNotThreads) {
  const std::string dir = test::scratch_dir("gen_seed");
  const std::string a = test::read_file(write_model("tiny", "Q8_0", dir + "/a.gguf", 7, 1));
  const std::string b = test::read_file(write_model("tiny", "Q8_0", dir + "/b.gguf", 7, 3));
  const std::string c = test::read_file(write_model("tiny", "Q8_0", dir + "/c.gguf", 8, 2));
  EXPECT_TRUE(a == b) << "one thread and three threads give different files";
  EXPECT_FALSE(a == c) << "seeds 7 and 8 give the same file";
}

TEST(GenModel, UnknownPresetAndTypeAreErrors) {
  const std::string dir = test::scratch_dir("gen_errors");
  EXPECT_THROW(write_model("llama-9", "F16", dir + "/x.gguf"), Error);
  EXPECT_THROW(write_model("tiny", "Q9_9", dir + "/x.gguf"), Error);
}

TEST(GenModel, PresetsHaveTheRealModelsParameterCounts) {
  // Hugging Face's parameter counts (tied embeddings counted once); Llama 3 shapes add the 32 or
  // 64 rope frequency factors that llama.cpp stores as a tensor.
  EXPECT_EQ(find_model_preset("llama-3.2-1b")->parameter_count(), 1235814400 + 32);
  EXPECT_EQ(find_model_preset("llama-3.2-3b")->parameter_count(), 3212749824 + 64);
  EXPECT_EQ(find_model_preset("llama-3.1-8b")->parameter_count(), 8030261248 + 64);
  EXPECT_EQ(find_model_preset("tinyllama-1.1b")->parameter_count(), 1100048384);
  EXPECT_EQ(find_model_preset("llama-2-7b")->parameter_count(), 6738415616);
}

TEST(GenModel, Llama3RopeFactorsFollowMetasScaling) {
  // Llama 3.2: factor 32, low 1, high 4, original context 8192, base 500000, head size 64.
  const std::vector<float> f = llama3_rope_freq_factors(*find_model_preset("llama-3.2-1b"));
  ASSERT_EQ(f.size(), 32u);
  EXPECT_EQ(f.front(), 1.0f);  // short wavelengths keep their frequency
  EXPECT_EQ(f.back(), 32.0f);  // long ones are slowed by the factor
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);
  // Wavelength of pair i: 2 pi * 500000^(2i/64). Between 2048 and 8192 tokens it is interpolated.
  int interpolated = 0;
  for (const float x : f) interpolated += x > 1.0f && x < 32.0f;
  EXPECT_GT(interpolated, 0);
}

// The tiny Llama 3 preset, generated once: its vocabulary is what gen-model writes for every
// Llama 3 shape.
class GenModelLlama3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(write_model("tiny-llama3", "F16", test::scratch_dir("gen_llama3") + "/m.gguf"));
  }
  static void TearDownTestSuite() { delete path_; }
  static std::string* path_;
};
std::string* GenModelLlama3::path_ = nullptr;

TEST_F(GenModelLlama3, HasTheLlama3VocabularyTiedEmbeddingsAndRopeFactors) {
  const auto model = Model::load(*path_);
  EXPECT_EQ(model->config().n_vocab, 128256);
  EXPECT_TRUE(model->weights().tied_output);
  ASSERT_NE(model->weights().rope_freq_factors, nullptr);
  EXPECT_EQ(model->weights().rope_freq_factors[model->config().n_rot / 2 - 1], 32.0f);
  const gguf::GgufFile& file = model->file();
  EXPECT_EQ(file.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(file.get_string("tokenizer.ggml.pre"), "llama-bpe");
  EXPECT_EQ(file.get_uint("tokenizer.ggml.bos_token_id"), 128000u);
  EXPECT_EQ(file.get_uint("tokenizer.ggml.eos_token_id"), 128001u);
  EXPECT_EQ(file.get_uint("tokenizer.ggml.eot_token_id"), 128009u);
  // The merges of Meta's Hugging Face tokenizer.json: same count, same first entries.
  const gguf::Array* merges = file.get_array("tokenizer.ggml.merges");
  ASSERT_NE(merges, nullptr);
  EXPECT_EQ(merges->items.size(), 280147u);
  EXPECT_EQ(*merges->items[0].as_string(), "\xC4\xA0 \xC4\xA0");  // "Ġ Ġ"
  EXPECT_EQ(*merges->items[4].as_string(), "i n");
}

// llama.cpp's test vectors for Llama 3 (test-tokenizer-0 with ggml-vocab-llama-bpe.gguf).
TEST_F(GenModelLlama3, TokenizesLlamaCppTestVectors) {
  const auto file = gguf::GgufFile::open(*path_);
  const auto tokenizer = Tokenizer::from_gguf(*file);
  const std::string name = "llama.cpp-vocab/ggml-vocab-llama-bpe.gguf";
  const std::string inp = test::read_file(test::shared_model_path(name + ".inp"));
  std::istringstream out(test::read_file(test::shared_model_path(name + ".out")));
  const std::string separator = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  int cases = 0;
  std::string line;
  while (pos < inp.size()) {
    const size_t end = inp.find(separator, pos);
    ASSERT_NE(end, std::string::npos);
    const std::string text = inp.substr(pos, end - pos);
    pos = end + separator.size();
    ASSERT_TRUE(std::getline(out, line));
    std::vector<TokenId> want;
    std::istringstream ids(line);
    for (TokenId id; ids >> id;) want.push_back(id);
    EXPECT_EQ(tokenizer->encode(text, false, false), want) << "'" << text << "'";
    ++cases;
  }
  EXPECT_EQ(cases, 46);
  EXPECT_EQ(tokenizer->encode("<|begin_of_text|>Hi<|eot_id|>", false, true),
            (std::vector<TokenId>{128000, 13347, 128009}));
}

// Merge-based BPE with the written merges against tiktoken's rank-based BPE, on text and on
// words glued from random tokens (where a merges list that is merely plausible goes wrong).
TEST_F(GenModelLlama3, TokenizesLikeTiktoken) {
  const auto file = gguf::GgufFile::open(*path_);
  const auto merged = Tokenizer::from_gguf(*file);
  const auto tiktoken = Tokenizer::from_tiktoken_llama3(test::shared_model_path("llama3/tokenizer.model"));
  std::string text = test::read_file(test::shared_model_path("text/wikitext-2-test.txt")).substr(0, 100000);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> pick(0, 127999);
  for (int word = 0; word < 5000; ++word) {
    for (int i = 0; i < 4; ++i) text += tokenizer::alphabet_to_bytes(tiktoken->vocab().tokens[size_t(pick(rng))]);
    text += ' ';
  }
  const std::vector<TokenId> want = tiktoken->encode(text, false, false);
  const std::vector<TokenId> got = merged->encode(text, false, false);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
}

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

CommandResult run_kestrel(const std::string& args) {
  const std::string command = std::string(KESTREL_BINARY_DIR) + "/tools/kestrel " + args + " 2>&1";
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(GenModelCli, GenModelThenBenchPrintsTableAndJson) {
  const std::string path = test::scratch_dir("gen_cli") + "/tiny.gguf";
  const std::string vocab = test::shared_model_path("llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
  const CommandResult gen =
      run_kestrel("gen-model --preset tiny --type Q8_0 -t 2 --vocab " + vocab + " -o " + path);
  ASSERT_EQ(gen.exit_code, 0) << gen.out;
  EXPECT_NE(gen.out.find("wrote " + path), std::string::npos) << gen.out;

  const CommandResult bench = run_kestrel("bench " + path +
                                          " -t 2 --pp 16 --tg 4 --batch 1,3 --batch-tg 2 --reps 1 "
                                          "--no-bandwidth --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.out;
  EXPECT_NE(bench.out.find("| pp16 |"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("| batch 3 x tg2 |"), std::string::npos) << bench.out;
  const std::string json_line = bench.out.substr(bench.out.rfind("\n{") + 1);
  const nlohmann::json j = nlohmann::json::parse(json_line);
  EXPECT_GT(j["pp"]["tok_s"].get<double>(), 0.0);
  EXPECT_GT(j["tg"]["tok_s"].get<double>(), 0.0);
  ASSERT_EQ(j["batch"].size(), 2u);
  EXPECT_EQ(j["batch"][1]["sequences"].get<int>(), 3);
  EXPECT_GT(j["weight_bytes_per_token"].get<int64_t>(), 0);
  EXPECT_TRUE(j["weights_in_memory"].get<bool>()) << "a small file is read into memory by default";
  EXPECT_NE(bench.out.find("per token, in memory)"), std::string::npos) << bench.out;

  // --mmap maps it instead; both flags at once are a usage error.
  const CommandResult mapped = run_kestrel("bench " + path + " -t 1 --pp 0 --tg 2 --batch 0 --reps 1 --no-bandwidth --json --mmap");
  ASSERT_EQ(mapped.exit_code, 0) << mapped.out;
  EXPECT_FALSE(nlohmann::json::parse(mapped.out.substr(mapped.out.rfind("\n{") + 1))["weights_in_memory"].get<bool>());
  const CommandResult both = run_kestrel("bench " + path + " --mmap --no-mmap");
  EXPECT_EQ(both.exit_code, 2) << both.out;
  EXPECT_NE(both.out.find("--mmap excludes --no-mmap"), std::string::npos) << both.out;
}

}  // namespace
}  // namespace kestrel
