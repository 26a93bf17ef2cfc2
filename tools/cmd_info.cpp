// kestrel info MODEL: architecture, hyper-parameters, parameter count, tensor types and a memory
// plan (weights, KV bytes per token, how many tokens of KV fit a memory budget).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include <fmt/format.h>

#include "cli_checks.h"
#include "commands.h"
#include "core/kv_spec.h"
#include "core/memory_info.h"
#include "kv_options.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct InfoOptions {
  std::string model;
  double budget_gib = 8.0;
  int block_size = 16;
  double kv_memory_fraction = 0.9;
  KvOptions kv;
  bool metadata = false;
};

void info(const InfoOptions& o) {
  // Mapped: the plan below subtracts the weights from what is available, as serve (which may read
  // them into memory, out of the available memory) will see it.
  const auto model = Model::load(o.model, {}, {.weights = WeightMemory::Mapped});
  const ModelConfig& c = model->config();
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  fmt::print("file:            {} (GGUF v{})\n", o.model, model->file().version());
  fmt::print("architecture:    {}{}\n", c.architecture, c.name.empty() ? "" : " (" + c.name + ")");
  fmt::print("parameters:      {} ({:.2f} M)\n", model->parameter_count(), double(model->parameter_count()) / 1e6);
  fmt::print("layers:          {}\n", c.n_layer);
  fmt::print("hidden size:     {}\n", c.n_embd);
  fmt::print("FFN size:        {}\n", c.n_ff);
  if (c.moe.enabled()) {
    fmt::print("experts:         {} per layer, {} per token, FFN {} each{}{}\n", c.moe.n_expert, c.moe.n_expert_used,
               c.moe.n_ff_expert, c.moe.n_ff_shared > 0 ? fmt::format(", shared expert FFN {}", c.moe.n_ff_shared) : "",
               c.moe.normalize_top_k ? ", top-k weights renormalized" : "");
    fmt::print("routing:         {} scores{}{}\n", c.moe.gating == MoeConfig::Gating::Sigmoid ? "sigmoid" : "softmax",
               c.moe.group_limited() ? fmt::format(", the best {} of {} expert groups", c.moe.n_group_used, c.moe.n_group) : "",
               c.moe.weights_scale != 1.0f ? fmt::format(", weights x {}", c.moe.weights_scale) : "");
  }
  fmt::print("heads:           {} query, {} key/value (head size {})\n", c.n_head, c.n_head_kv, c.head_dim);
  fmt::print("RoPE:            {} dims, base {}, {} order, scale {}{}\n", c.n_rot, c.rope_freq_base,
             c.rope_neox ? "NeoX" : "normal", c.rope_freq_scale,
             model->weights().rope_freq_factors ? ", per-frequency factors" : "");
  fmt::print("RMSNorm eps:     {}\n", c.rms_eps);
  fmt::print("context:         {} (trained)\n", c.n_ctx_train);
  fmt::print("vocabulary:      {} tokens ({}), BOS {}, EOS {}\n", c.n_vocab,
             tokenizer->vocab().kind == VocabKind::SentencePiece ? "SentencePiece" : "byte-level BPE",
             tokenizer->bos_id(), tokenizer->eos_id());
  fmt::print("output head:     {}\n", model->weights().tied_output ? "tied to the embedding" : "separate");

  std::map<std::string, std::pair<int, int64_t>> types;
  for (const auto& t : model->file().tensors()) {
    auto& entry = types[std::string(dtype_name(t.type))];
    ++entry.first;
    entry.second += int64_t(t.num_bytes);
  }
  fmt::print("tensor types:   ");
  for (const auto& [name, entry] : types) {
    fmt::print(" {} x {} ({})", entry.first, name, human_bytes(double(entry.second)));
  }
  fmt::print("\n");
  // A pre-quantized Hugging Face checkpoint (loader/hf_quantized.h): what it was, and any layer
  // no Kestrel format holds exactly (kept as F32).
  if (const gguf::Value* source = model->file().find("kestrel.quantization.source"); source && source->as_string()) {
    fmt::print("checkpoint:      {}\n", *source->as_string());
  }
  if (const gguf::Value* f = model->file().find("kestrel.quantization.fallbacks"); f && f->as_array()) {
    for (const gguf::Value& v : f->as_array()->items) {
      if (v.as_string()) fmt::print("  F32 fallback:  {}\n", *v.as_string());
    }
  }

  const double weights = double(model->weight_bytes());
  KvCacheSpec spec = model->kv_spec(o.kv.k_type(), o.kv.v_type(), o.block_size);
  spec.rotate = o.kv.rotate;
  validate_kv_spec(spec);
  const double kv_per_token = double(spec.token_bytes() * c.n_layer);
  const double budget = o.budget_gib * double(int64_t(1) << 30);
  fmt::print("memory plan:\n");
  fmt::print("  weights:            {}\n", human_bytes(weights));
  fmt::print("  KV cache per token: {} ({} K and V, {} layers x {} heads x {} values)\n",
             human_bytes(kv_per_token), spec.describe(), c.n_layer, c.n_head_kv, c.head_dim);
  fmt::print("  KV per block:       {} ({} tokens)\n", human_bytes(kv_per_token * o.block_size), o.block_size);
  auto tokens_in = [&](double bytes, double per_token) {
    return int64_t(bytes / (per_token * o.block_size)) * o.block_size;
  };
  if (budget > weights) {
    const int64_t tokens = tokens_in(budget - weights, kv_per_token);
    fmt::print("  budget {}:    {} KV blocks = {} tokens of context across all sequences\n",
               human_bytes(budget), tokens / o.block_size, tokens);
  } else {
    fmt::print("  budget {}:    too small for the weights alone\n", human_bytes(budget));
  }
  // What `serve` would size from this machine now (--kv-memory-fraction of what is available,
  // less the weights; the activations take a little more).
  const double available = double(available_memory_bytes());
  const double spare = std::max(0.0, available - weights) * o.kv_memory_fraction;
  fmt::print("  this machine:       {} available; {:.2f} of it less the weights holds {} tokens\n",
             human_bytes(available), o.kv_memory_fraction, tokens_in(spare, kv_per_token));
  fmt::print("  every KV type (bytes per token, tokens in the budget, x f32):\n");
  const double f32_per_token = double(model->kv_spec(DType::F32, DType::F32).token_bytes() * c.n_layer);
  for (DType type : kv_types()) {
    KvCacheSpec t = model->kv_spec(type, type, o.block_size);
    const int64_t block = dtype_layout(type).block_size;
    if (c.head_dim % block != 0) {
      fmt::print("    {:<6} head size {} is not a multiple of {}: not usable\n", kv_type_name(type), c.head_dim, block);
      continue;
    }
    const double per_token = double(t.token_bytes() * c.n_layer);
    fmt::print("    {:<6} {:>12} {:>12} tokens  {:.2f}x\n", kv_type_name(type), human_bytes(per_token),
               budget > weights ? tokens_in(budget - weights, per_token) : 0, f32_per_token / per_token);
  }
  if (o.metadata) {
    fmt::print("metadata:\n");
    for (const auto& kv : model->file().metadata()) {
      fmt::print("  {} = {}\n", kv.key, gguf::value_to_display_string(kv.value));
    }
  }
}

}  // namespace

void register_info(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "describe a model and plan its memory");
  cmd->add_option("model", options->model, "GGUF model file")->required();
  cmd->add_option("--budget-gib", options->budget_gib, "memory budget for the plan, GiB")
      ->check(number_range(0.0, double(1 << 20), Bound::Open));  // up to 1 PiB
  cmd->add_option("--block-size", options->block_size, "KV block size in tokens")->check(int_range(1, 1024));
  cmd->add_option("--kv-memory-fraction", options->kv_memory_fraction, "share of the available memory for the plan")
      ->check(number_range(0.01, 1.0));
  add_kv_options(*cmd, options->kv, /*with_sinks=*/false);
  cmd->add_flag("--metadata", options->metadata, "also list every metadata key");
  cmd->callback([options] { info(*options); });
}

}  // namespace kestrel::cli
