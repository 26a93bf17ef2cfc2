#include "engine/calibration_pass.h"

#include <vector>

#include "core/error.h"
#include "quant/format.h"
#include "runner/model_runner.h"

namespace kestrel {

std::string calibration_limit(const Model& model, bool names_only, bool stacks) {
  const ModelConfig& c = model.config();
  const gguf::GgufFile& file = model.file();
  if (file.find_tensor("blk.0.attn_qkv.weight") != nullptr) return "fused attn_qkv tensors";
  if (c.gated_ffn && !c.moe.enabled() && file.find_tensor("blk.0.ffn_gate.weight") == nullptr) {
    return "a fused gate+up ffn_up tensor";
  }
  if (names_only) return "";
  if (c.mla.enabled() && !stacks) return "latent attention";
  if (c.moe.enabled() && !stacks) return "Mixture-of-Experts layers";
  if (c.norm != NormKind::Rms) return "LayerNorm";
  if (!c.input_norms) return "blocks without input norms";
  if (c.parallel_block) return "parallel attention and MLP blocks";
  if (!c.gated_ffn) return "an ungated MLP";
  return "";
}

void run_calibration_pass(const Model& model, std::span<const int32_t> tokens, const CalibrationPass& o,
                          ActivationObserver& observer, const char* method) {
  if (const std::string limit = calibration_limit(model, false, o.stacks); !limit.empty()) {
    fail("{} calibration does not support architecture '{}' yet ({}); quantize it with --method rtn",
         method, model.config().architecture, limit);
  }
  if (o.n_ctx < 2 || o.n_chunks < 1) {
    fail("{} calibration needs chunks of at least 2 tokens, got {} x {}", method, o.n_chunks, o.n_ctx);
  }
  if (int64_t(tokens.size()) < o.n_chunks * o.n_ctx) {
    fail("the calibration text has {} tokens: {} chunks of {} tokens need {} (use a longer text, fewer "
         "chunks or a shorter context)", tokens.size(), o.n_chunks, o.n_ctx, o.n_chunks * o.n_ctx);
  }
  // One sequence per chunk, each with its own range of blocks in every KV group; no logits.
  RunnerConfig config;
  config.num_threads = o.num_threads;
  config.kv = model.kv_spec(DType::F16, DType::F16);
  config.kv.context_length = o.n_ctx;
  const int block_size = config.kv.block_size;
  const int64_t blocks_per_seq = (o.n_ctx + block_size - 1) / block_size;
  const int num_groups = int(model.kv_layout().group_windows.size());
  config.group_blocks.assign(size_t(num_groups), blocks_per_seq * o.n_chunks);
  ModelRunner runner(model, config);

  std::vector<std::vector<int32_t>> chunk_tokens(size_t(o.n_chunks));
  std::vector<std::vector<BlockId>> tables(size_t(o.n_chunks));
  std::vector<SequenceChunk> chunks(size_t(o.n_chunks));
  for (int64_t s = 0; s < o.n_chunks; ++s) {
    auto& ct = chunk_tokens[size_t(s)];
    ct.assign(tokens.begin() + std::ptrdiff_t(s * o.n_ctx), tokens.begin() + std::ptrdiff_t((s + 1) * o.n_ctx));
    if (o.bos_token >= 0) ct[0] = o.bos_token;
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[size_t(s)].push_back(BlockId(s * blocks_per_seq + b));
    SequenceChunk& c = chunks[size_t(s)];
    c.tokens = ct;
    c.block_tables.assign(size_t(num_groups), tables[size_t(s)]);
    c.logits_from = -1;
  }
  runner.set_activation_observer(&observer);
  runner.execute(chunks);
}

std::vector<LinearKind> linear_readers_of(LinearKind kind) {
  switch (kind) {
    case LinearKind::AttnQ: return {LinearKind::AttnQ, LinearKind::AttnK, LinearKind::AttnV};
    case LinearKind::AttnOutput: return {LinearKind::AttnOutput};
    case LinearKind::FfnGate: return {LinearKind::FfnGate, LinearKind::FfnUp};
    case LinearKind::FfnDown: return {LinearKind::FfnDown};
    case LinearKind::SharedGate: return {LinearKind::SharedGate, LinearKind::SharedUp};
    case LinearKind::SharedDown: return {LinearKind::SharedDown};
    case LinearKind::SharedGateInp: return {LinearKind::SharedGateInp};
    case LinearKind::AttnQA: return {LinearKind::AttnQA};
    case LinearKind::AttnQB: return {LinearKind::AttnQB};
    case LinearKind::AttnKvA: return {LinearKind::AttnKvA};
    // Stacks, shown matrix by matrix (observe_stacked): an expert's gate and up share its rows.
    case LinearKind::ExpertGate: return {LinearKind::ExpertGate, LinearKind::ExpertUp};
    case LinearKind::ExpertDown: return {LinearKind::ExpertDown};
    case LinearKind::AttnKB: return {LinearKind::AttnKB};
    case LinearKind::AttnVB: return {LinearKind::AttnVB};
    default: return {};
  }
}

std::vector<float> dequantize_matrix(const WeightView& view, ThreadPool& pool) {
  const quant::WeightFormat& from = quant::require_format(view.type);
  const int64_t in_row = quant::row_bytes(from, view.cols);
  std::vector<float> w(static_cast<size_t>(view.rows * view.cols));
  pool.parallel_for(view.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      from.dequantize_row(static_cast<const uint8_t*>(view.data) + r * in_row, w.data() + r * view.cols, view.cols);
    }
  });
  return w;
}

}  // namespace kestrel
