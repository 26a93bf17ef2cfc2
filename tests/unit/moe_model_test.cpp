// Mixture-of-Experts models end to end on small files made from stories260K: its dense FFN of
// every layer replaced by a router and stacks of experts in llama.cpp's layout (Mixtral: arch
// "llama" with llama.expert_count; Qwen2-MoE: arch "qwen2moe" with biases and a shared expert).
//  - Experts that all equal the dense FFN must give the dense model's logits (routing weights
//    summing to 1): the loader's views, offsets and orientation and the forward pass's wiring.
//  - A request's logits are bitwise the same alone and in a batch (distinct random experts).
//  - Bad files (inconsistent expert counts or shapes, missing tensors, bad keys) are errors naming
//    the tensor or key; calibration refuses MoE layers.
//  - Tensor parallelism's split of each expert adds up to the whole layer (bitwise per row in the
//    deterministic mode).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "model/model.h"
#include "model/moe_ffn.h"
#include "moe_split_check.h"
#include "quant/format.h"
#include "runner/model_runner.h"
#include "reference_logits.h"
#include "model_load_error.h"
#include "test_paths.h"

namespace kestrel {
namespace {

constexpr int64_t kExperts = 4;

struct MoeFileOptions {
  std::string arch = "llama";       // "llama" (Mixtral layout) or "qwen2moe"
  bool identical_experts = false;   // every expert = the dense FFN; else dense + noise per expert
  // Last say over each key and tensor (return false to drop it).
  std::function<bool(const std::string&, gguf::Value&)> edit_key = [](const std::string&, gguf::Value&) { return true; };
  std::function<bool(gguf::TensorInfo&, std::vector<uint8_t>&)> edit_tensor =
      [](gguf::TensorInfo&, std::vector<uint8_t>&) { return true; };
};

std::vector<float> as_f32(const gguf::TensorInfo& t) {
  std::vector<float> values(size_t(t.num_elements));
  const quant::WeightFormat& f = quant::require_format(t.type);
  const int64_t row = t.dims[0], row_bytes = quant::row_bytes(f, row);
  for (int64_t r = 0; r < t.num_elements / row; ++r) f.dequantize_row(t.data + r * row_bytes, values.data() + r * row, row);
  return values;
}

std::vector<uint8_t> bytes_of(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// stories260K with each layer's ffn_gate/up/down turned into kExperts experts (2 used per token).
std::string write_moe_model(const std::string& name, const MoeFileOptions& o) {
  const auto source = gguf::GgufFile::open(test::shared_model_path("stories260K.gguf"));
  const std::string prefix = o.arch + ".";
  gguf::GgufWriter writer;
  std::vector<std::pair<std::string, gguf::Value>> keys;
  for (const auto& kv : source->metadata()) {
    std::string key = kv.key;
    if (key.starts_with("llama.")) key = prefix + key.substr(6);
    gguf::Value value = kv.value;
    if (key == "general.architecture") value = gguf::Value::of_string(o.arch);
    keys.emplace_back(key, value);
  }
  keys.emplace_back(prefix + "expert_count", gguf::Value::of_u32(kExperts));
  keys.emplace_back(prefix + "expert_used_count", gguf::Value::of_u32(2));
  if (o.arch == "qwen2moe") {
    keys.emplace_back(prefix + "expert_feed_forward_length", gguf::Value::of_u32(172));
    keys.emplace_back(prefix + "expert_shared_feed_forward_length", gguf::Value::of_u32(172));
  }
  for (auto& [key, value] : keys) {
    if (o.edit_key(key, value)) writer.set(key, value);
  }
  std::mt19937 rng(1234);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  auto add = [&](gguf::TensorInfo info, std::vector<uint8_t> bytes) {
    if (o.edit_tensor(info, bytes)) writer.add_tensor(info.name, info.type, info.dims, std::move(bytes));
  };
  for (const auto& t : source->tensors()) {
    const std::string& n = t.name;
    const bool gate = n.ends_with("ffn_gate.weight"), up = n.ends_with("ffn_up.weight"),
               down = n.ends_with("ffn_down.weight");
    if (!(gate || up || down)) {
      add(t, std::vector<uint8_t>(t.data, t.data + t.num_bytes));
      continue;
    }
    const std::string block = n.substr(0, n.find('.', 4) + 1);  // "blk.N."
    const std::vector<float> dense = as_f32(t);
    std::vector<float> stack;
    for (int64_t e = 0; e < kExperts; ++e) {
      for (float v : dense) stack.push_back(o.identical_experts ? v : v + noise(rng) * float(e + 1));
    }
    const std::string base = gate ? "ffn_gate" : up ? "ffn_up" : "ffn_down";
    add({block + base + "_exps.weight", {t.dims[0], t.dims[1], kExperts}, DType::F32}, bytes_of(stack));
    if (o.arch == "qwen2moe") {
      std::vector<float> shared = dense;
      for (float& v : shared) v *= 0.5f;
      add({block + base + "_shexp.weight", t.dims, DType::F32}, bytes_of(shared));
    }
    if (gate) {
      std::vector<float> router(size_t(64 * kExperts));
      for (float& v : router) v = noise(rng) * 20.0f;
      add({block + "ffn_gate_inp.weight", {64, kExperts}, DType::F32}, bytes_of(router));
      if (o.arch == "qwen2moe") {
        std::vector<float> shared_gate(64);
        for (float& v : shared_gate) v = noise(rng) * 10.0f;
        add({block + "ffn_gate_inp_shexp.weight", {64}, DType::F32}, bytes_of(shared_gate));
        for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
          const int64_t width = std::string(bias) == "attn_q.bias" ? 64 : 32;
          std::vector<float> values(static_cast<size_t>(width));
          for (float& v : values) v = noise(rng);
          add({block + bias, {width}, DType::F32}, bytes_of(values));
        }
      }
    }
  }
  const std::string path = test::scratch_dir("moe_model_" + name) + "/model.gguf";
  writer.write(path);
  return path;
}

using test::expect_load_error;

// Logits of every token of each prompt, each prompt a sequence of its own, all in one batch.
std::vector<std::vector<float>> prompt_logits(const Model& model, const std::vector<std::vector<TokenId>>& prompts) {
  const std::vector<float> logits = test::batch_logits(model, prompts, std::vector<int64_t>(prompts.size(), 0));
  const size_t n_vocab = size_t(model.config().n_vocab);
  std::vector<std::vector<float>> out;
  size_t row = 0;
  for (const auto& p : prompts) {
    out.emplace_back(logits.begin() + row * n_vocab, logits.begin() + (row + p.size()) * n_vocab);
    row += p.size();
  }
  return out;
}

const std::vector<std::vector<TokenId>> kPrompts = {
    {1, 403, 407, 261, 378, 32, 9, 270, 300, 50, 60, 70, 80, 90, 100, 110, 120, 130},
    {1, 65, 300},
    {1, 77, 88, 99, 111, 222, 333, 444},
};

TEST(MoeModel, LoadsMixtralLayoutAsViewsIntoTheStacks) {
  const auto model = Model::load(write_moe_model("mixtral_load", {}));
  const MoeConfig& m = model->config().moe;
  EXPECT_EQ(m.n_expert, kExperts);
  EXPECT_EQ(m.n_expert_used, 2);
  EXPECT_EQ(m.n_ff_expert, 172) << "Mixtral: the experts are feed_forward_length wide";
  EXPECT_TRUE(m.normalize_top_k);
  for (const LayerWeights& l : model->weights().layers) {
    ASSERT_TRUE(l.moe.has_experts());
    EXPECT_FALSE(l.moe.has_shared_expert());
    EXPECT_EQ(l.w_gate.data, nullptr);
    // Expert 3's matrices start 3 experts' bytes into their stacks (F32 here): no copies.
    const auto* gate = static_cast<const uint8_t*>(l.moe.gate_stack.data);
    EXPECT_EQ(l.moe.gate(3).data, gate + 3 * 172 * 64 * 4);
    EXPECT_EQ(l.moe.down(3).data, static_cast<const uint8_t*>(l.moe.down_stack.data) + 3 * 64 * 172 * 4);
    EXPECT_EQ(l.moe.down(3).rows, 64);
    EXPECT_EQ(l.moe.down(3).cols, 172);
  }
}

TEST(MoeModel, IdenticalExpertsGiveTheDenseModelsLogits) {
  const auto dense = Model::load(test::shared_model_path("stories260K.gguf"));
  MoeFileOptions o;
  o.identical_experts = true;
  const auto moe = Model::load(write_moe_model("identical", o));
  const auto want = prompt_logits(*dense, kPrompts);
  const auto got = prompt_logits(*moe, kPrompts);
  double worst = 0.0, scale = 0.0;
  for (size_t s = 0; s < kPrompts.size(); ++s) {
    for (size_t i = 0; i < want[s].size(); ++i) {
      worst = std::max(worst, double(std::abs(got[s][i] - want[s][i])));
      scale = std::max(scale, double(std::abs(want[s][i])));
    }
  }
  // Only rounding differs: w1 * y + w2 * y with w1 + w2 = 1 against y.
  EXPECT_LE(worst, 1e-4 * scale + 1e-5) << "scale " << scale;
  EXPECT_GT(scale, 1.0);
}

TEST(MoeModel, RandomExpertsChangeTheLogits) {
  // The check above would pass if the experts were skipped and the dense FFN kept; this one
  // would not pass then: distinct experts must move the logits.
  const auto dense = Model::load(test::shared_model_path("stories260K.gguf"));
  const auto moe = Model::load(write_moe_model("random", {}));
  const auto a = prompt_logits(*dense, {kPrompts[1]});
  const auto b = prompt_logits(*moe, {kPrompts[1]});
  double worst = 0.0;
  for (size_t i = 0; i < a[0].size(); ++i) worst = std::max(worst, double(std::abs(a[0][i] - b[0][i])));
  EXPECT_GT(worst, 1e-2);
}

TEST(MoeModel, RequestLogitsAreBitwiseTheSameAloneAndInABatch) {
  for (const std::string arch : {"llama", "qwen2moe"}) {
    SCOPED_TRACE(arch);
    MoeFileOptions o;
    o.arch = arch;
    const auto model = Model::load(write_moe_model("invariance_" + arch, o));
    EXPECT_EQ(model->weights().layers[0].moe.has_shared_expert(), arch == "qwen2moe");
    const auto together = prompt_logits(*model, kPrompts);
    for (size_t s = 0; s < kPrompts.size(); ++s) {
      const auto alone = prompt_logits(*model, {kPrompts[s]});
      ASSERT_EQ(alone[0].size(), together[s].size());
      EXPECT_EQ(0, std::memcmp(alone[0].data(), together[s].data(), alone[0].size() * sizeof(float)))
          << "prompt " << s << " differs alone and in the batch";
    }
  }
}

TEST(MoeModel, ExpertCountMismatchNamesTheTensor) {
  MoeFileOptions o;
  o.edit_tensor = [](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
    if (t.name == "blk.2.ffn_up_exps.weight") {
      t.dims[2] = 3;
      bytes.resize(bytes.size() / 4 * 3);
    }
    return true;
  };
  expect_load_error(write_moe_model("count", o), {"blk.2.ffn_up_exps.weight", "holds 3 experts", "llama.expert_count is 4"});
}

TEST(MoeModel, RouterMismatchNamesTheTensor) {
  MoeFileOptions o;
  o.edit_tensor = [](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
    if (t.name == "blk.1.ffn_gate_inp.weight") {
      t.dims[1] = 5;
      bytes.resize(64 * 5 * 4);
    }
    return true;
  };
  expect_load_error(write_moe_model("router", o), {"blk.1.ffn_gate_inp.weight", "scores 5 experts"});
}

TEST(MoeModel, ExpertShapeMismatchNamesTheTensor) {
  MoeFileOptions o;
  o.edit_tensor = [](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
    if (t.name == "blk.0.ffn_down_exps.weight") {
      t.dims = {170, 64, kExperts};
      bytes.resize(170 * 64 * kExperts * 4);
    }
    return true;
  };
  expect_load_error(write_moe_model("shape", o), {"blk.0.ffn_down_exps.weight", "[172, 64, 4]", "[170, 64, 4]"});
  o.edit_tensor = [](gguf::TensorInfo& t, std::vector<uint8_t>&) {
    if (t.name == "blk.3.ffn_gate_exps.weight") t.dims = {64, 172 * kExperts};  // 2-D, same bytes
    return true;
  };
  expect_load_error(write_moe_model("flat", o), {"blk.3.ffn_gate_exps.weight", "should be 3-D"});
}

TEST(MoeModel, MissingExpertTensorIsNamed) {
  MoeFileOptions o;
  o.edit_tensor = [](gguf::TensorInfo& t, std::vector<uint8_t>&) { return t.name != "blk.4.ffn_down_exps.weight"; };
  expect_load_error(write_moe_model("missing", o), {"missing tensor 'blk.4.ffn_down_exps.weight'"});
  o.arch = "qwen2moe";
  o.edit_tensor = [](gguf::TensorInfo& t, std::vector<uint8_t>&) { return t.name != "blk.0.ffn_gate_inp_shexp.weight"; };
  expect_load_error(write_moe_model("missing_shared", o), {"missing tensor 'blk.0.ffn_gate_inp_shexp.weight'"});
}

TEST(MoeModel, BadExpertKeysAreNamed) {
  MoeFileOptions o;
  o.edit_key = [](const std::string& key, gguf::Value& v) {
    if (key == "llama.expert_used_count") v = gguf::Value::of_u32(5);
    return true;
  };
  expect_load_error(write_moe_model("used", o), {"llama.expert_used_count 5", "llama.expert_count 4"});
  o.arch = "qwen2moe";
  o.edit_key = [](const std::string& key, gguf::Value&) { return key != "qwen2moe.expert_count"; };
  expect_load_error(write_moe_model("no_count", o), {"qwen2moe", "expert_count"});
}

// Tensor parallelism splits each expert's (and the shared expert's) FFN channels: the ranks' MoE
// outputs, each a partial sum over its channels, add up to the one-process layer's (to float
// rounding); under --tp-deterministic each rank computes whole sums for its output rows, which
// are bitwise the one-process rows. (End to end under mpirun: distributed_test.)
TEST(MoeModel, TensorParallelSplitsEachExpertsChannels) {
  for (const char* arch : {"llama", "qwen2moe"}) {
    MoeFileOptions o;
    o.arch = arch;
    test::expect_tp_parts_add_up(write_moe_model(std::string("tp_") + arch, o), 1);
  }
  // Pipeline stages load their own layers' experts only.
  const std::string path = write_moe_model("tp", {});
  const auto stage = Model::load(path, ShardRequest{1, 0, 2, 1, false});
  const auto& layers = stage->weights().layers;
  EXPECT_FALSE(layers.front().moe.has_experts());
  EXPECT_TRUE(layers.back().moe.has_experts());
}

class CountingObserver : public ActivationObserver {
 public:
  void observe(int64_t, LinearKind, const float*, int64_t, int64_t) override {}
};

TEST(MoeModel, CalibrationRefusesMoeLayers) {
  const auto model = Model::load(write_moe_model("observer", {}));
  CountingObserver observer;
  try {
    test::run_observed_chunk(*model, observer);
    FAIL() << "an observer ran over MoE layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Mixture-of-Experts"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel
