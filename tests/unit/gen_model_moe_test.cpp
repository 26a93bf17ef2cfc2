// Synthetic Mixture-of-Experts models (kestrel gen-model's MoE presets): the file is llama.cpp's
// Qwen3-MoE layout (keys, expert stacks, router kept F32 by the k-quant recipes), Kestrel loads
// and runs it, and the presets count the real models' parameters.
#include <gtest/gtest.h>

#include <cmath>

#include "convert/gen_model.h"
#include "loader/gguf_reader.h"
#include "model/model.h"
#include "runner/model_runner.h"
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

    RunnerConfig rc;
    rc.kv = model->kv_spec(DType::F16, DType::F16, 16);
    rc.group_blocks = {1};
    ModelRunner runner(*model, rc);
    const std::vector<TokenId> tokens = {50256, 464, 3290, 318};
    const std::vector<BlockId> table = {0};
    SequenceChunk chunk;
    chunk.tokens = tokens;
    chunk.block_tables = {std::span<const BlockId>(table)};
    chunk.logits_from = 0;
    const std::span<float> logits = runner.execute(std::span<const SequenceChunk>(&chunk, 1));
    ASSERT_EQ(logits.size(), tokens.size() * size_t(c.n_vocab));
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
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

}  // namespace
}  // namespace kestrel
