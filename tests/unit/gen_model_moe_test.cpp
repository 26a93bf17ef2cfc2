// Synthetic Mixture-of-Experts models (kestrel gen-model's MoE presets): the file is llama.cpp's
// Qwen3-MoE layout (DeepSeek-V2's deepseek2 layout for the MLA presets) (keys, expert stacks, router kept F32 by the k-quant recipes), Kestrel loads
// and runs it, and the presets count the real models' parameters.
#include <gtest/gtest.h>

#include <cmath>

#include "convert/gen_model.h"
#include "loader/gguf_reader.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "moe_split_check.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::string write_moe_model(const std::string& type) {
  GenModelOptions o;
  o.preset = "tiny-moe";
  o.type = type;
  o.output = test::scratch_dir("gen_model_moe_" + type) + "/model.gguf";
  o.num_threads = 2;
  o.gpt2_vocab_gguf = test::shared_model_path("llama.cpp-vocab/ggml-vocab-gpt-2.gguf");
  generate_model(o);
  return o.output;
}

// One 4-token step through a runner (F16 cache, one block): logits for every token, all finite.
void expect_four_tokens_run(const Model& model) {
  RunnerConfig rc;
  rc.kv = model.kv_spec(DType::F16, DType::F16, 16);
  rc.group_blocks = {1};
  ModelRunner runner(model, rc);
  const std::vector<TokenId> tokens = {50256, 464, 3290, 318};
  const std::vector<BlockId> table = {0};
  SequenceChunk chunk;
  chunk.tokens = tokens;
  chunk.block_tables = {std::span<const BlockId>(table)};
  chunk.logits_from = 0;
  const std::span<float> logits = runner.execute(std::span<const SequenceChunk>(&chunk, 1));
  ASSERT_EQ(logits.size(), tokens.size() * size_t(model.config().n_vocab));
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(GenModelMoe, TinyMoeIsQwen3MoeLayoutAndRuns) {
  for (const std::string type : {"F32", "Q4_K_M"}) {
    SCOPED_TRACE(type);
    const auto model = Model::load(write_moe_model(type));
    const ModelPreset& p = *find_model_preset("tiny-moe");
    const ModelConfig& c = model->config();
    EXPECT_EQ(c.architecture, "qwen3moe");
    EXPECT_EQ(c.moe.n_expert, p.n_expert);
    EXPECT_EQ(c.moe.n_expert_used, p.n_expert_used);
    EXPECT_EQ(c.moe.n_ff_expert, p.n_ff_expert);
    EXPECT_TRUE(c.moe.normalize_top_k);
    EXPECT_EQ(model->parameter_count(), p.parameter_count());
    const gguf::TensorInfo* gate_exps = model->file().find_tensor("blk.1.ffn_gate_exps.weight");
    ASSERT_NE(gate_exps, nullptr);
    EXPECT_EQ(gate_exps->dims, (std::vector<int64_t>{p.n_embd, p.n_ff_expert, p.n_expert}));
    EXPECT_EQ(model->file().find_tensor("blk.0.ffn_gate_inp.weight")->type, DType::F32) << "routers stay F32";
    for (const LayerWeights& l : model->weights().layers) EXPECT_TRUE(l.moe.has_experts());

    expect_four_tokens_run(*model);
  }
}

TEST(GenModelMoe, OlmoePresetCountsTotalAndActiveParameters) {
  const ModelPreset& p = *find_model_preset("olmoe-1b-7b");
  // OLMoE-1B-7B: 6.9B parameters, 1.3B active (with its 50,304-token vocabulary).
  EXPECT_EQ(p.parameter_count(), 6918907904);
  EXPECT_EQ(p.active_parameter_count(), 1178839040);
  EXPECT_EQ(find_model_preset("llama-3.2-1b")->active_parameter_count(),
            find_model_preset("llama-3.2-1b")->parameter_count()) << "tied: the table is the head";
}

// The DeepSeek-V2 presets: llama.cpp's deepseek2 layout (latent attention tensors, a dense first
// layer, ungated shared experts), loaded and run by Kestrel.
TEST(GenModelMoe, TinyMlaIsDeepseek2LayoutAndRuns) {
  GenModelOptions o;
  o.preset = "tiny-mla";
  o.type = "Q8_0";
  o.output = test::scratch_dir("gen_model_mla") + "/model.gguf";
  o.num_threads = 2;
  o.gpt2_vocab_gguf = test::shared_model_path("llama.cpp-vocab/ggml-vocab-gpt-2.gguf");
  generate_model(o);
  const auto model = Model::load(o.output);
  const ModelPreset& p = *find_model_preset("tiny-mla");
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.architecture, "deepseek2");
  EXPECT_EQ(c.mla.kv_lora_rank, 32);
  EXPECT_EQ(c.head_dim, 32 + 16);
  EXPECT_EQ(c.attn_out_width(), 4 * 16);
  EXPECT_EQ(c.moe.n_ff_shared, 2 * 32);
  EXPECT_EQ(model->parameter_count(), p.parameter_count());
  EXPECT_FALSE(model->weights().layers[0].moe.has_experts());
  EXPECT_TRUE(model->weights().layers[1].moe.has_shared_expert());
  expect_four_tokens_run(*model);
}

TEST(GenModelMoe, DeepseekV2LitePresetCountsTotalAndActiveParameters) {
  const ModelPreset& p = *find_model_preset("deepseek-v2-lite");
  // DeepSeek-V2-Lite's safetensors hold 15,706,484,224 parameters with its 102,400-token
  // vocabulary (embedding and head, 2048 wide); 2.45B are active per token (its 2.4B: 6 of 64
  // experts in 26 MoE layers, the dense first layer, the head).
  const int64_t vocab_rows = (102400 - p.n_vocab) * p.n_embd;
  EXPECT_EQ(p.parameter_count() + 2 * vocab_rows, 15706484224);
  EXPECT_EQ(p.active_parameter_count() + vocab_rows, 2451437056);
}

// Tensor parallelism over quantized expert stacks (tiny-moe: 8 experts of 128 channels): each
// rank's gate/up rows and down columns are whole blocks of the file's format, repacked.
TEST(GenModelMoe, TensorParallelPartsOfQuantizedExpertsAddUp) {
  for (const char* type : {"Q8_0", "Q4_0"}) {
    GenModelOptions o;
    o.preset = "tiny-moe";
    o.type = type;
    o.pure = true;
    o.output = test::scratch_dir(std::string("gen_model_moe_tp_") + type) + "/model.gguf";
    o.num_threads = 2;
    o.gpt2_vocab_gguf = test::shared_model_path("llama.cpp-vocab/ggml-vocab-gpt-2.gguf");
    generate_model(o);
    test::expect_tp_parts_add_up(o.output, 1);
  }
}

}  // namespace
}  // namespace kestrel
