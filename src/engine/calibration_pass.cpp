#include "engine/calibration_pass.h"

#include <algorithm>
#include <memory>
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

namespace {

// Throws (with the numbers) unless the model and the tokens can make the pass's chunks.
void check_pass(const Model& model, std::span<const int32_t> tokens, const CalibrationPass& o, const char* method) {
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
}

// A runner with the K/V of `seqs` sequences of n_ctx tokens, one range of blocks each per group.
std::unique_ptr<ModelRunner> calibration_runner(const Model& model, const CalibrationPass& o, int64_t seqs) {
  RunnerConfig config;
  config.num_threads = o.num_threads;
  config.kv = model.kv_spec(DType::F16, DType::F16);
  config.kv.context_length = o.n_ctx;
  const int64_t blocks_per_seq = (o.n_ctx + config.kv.block_size - 1) / config.kv.block_size;
  config.group_blocks.assign(model.kv_layout().group_windows.size(), blocks_per_seq * seqs);
  return std::make_unique<ModelRunner>(model, config);
}

// Chunks [first, first + count) of the pass as sequences 0..count-1 of a runner made for at least
// `count` (their tokens and block tables kept alive by this object); no logits.
class CalibrationChunks {
 public:
  CalibrationChunks(std::span<const int32_t> tokens, const CalibrationPass& o, int64_t first, int64_t count,
                    int block_size, int num_groups)
      : tokens_(size_t(count)), tables_(size_t(count)), chunks_(size_t(count)) {
    const int64_t blocks_per_seq = (o.n_ctx + block_size - 1) / block_size;
    for (int64_t s = 0; s < count; ++s) {
      auto& ct = tokens_[size_t(s)];
      const auto begin = tokens.begin() + std::ptrdiff_t((first + s) * o.n_ctx);
      ct.assign(begin, begin + std::ptrdiff_t(o.n_ctx));
      if (o.bos_token >= 0) ct[0] = o.bos_token;
      for (int64_t b = 0; b < blocks_per_seq; ++b) tables_[size_t(s)].push_back(BlockId(s * blocks_per_seq + b));
      SequenceChunk& c = chunks_[size_t(s)];
      c.tokens = ct;
      c.block_tables.assign(size_t(num_groups), tables_[size_t(s)]);
      c.logits_from = -1;
    }
  }
  std::span<const SequenceChunk> chunks() const { return chunks_; }

 private:
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<std::vector<BlockId>> tables_;
  std::vector<SequenceChunk> chunks_;
};

}  // namespace

void run_layerwise_calibration(const Model& model, std::span<const int32_t> tokens, const CalibrationPass& o,
                               LayerPassObserver& observer, const char* method) {
  check_pass(model, tokens, o, method);
  const int64_t per_slice =
      std::clamp<int64_t>(o.slice_chunks > 0 ? o.slice_chunks : 4096 / o.n_ctx, 1, o.n_chunks);
  const int64_t n_slices = (o.n_chunks + per_slice - 1) / per_slice;
  const auto runner = calibration_runner(model, o, per_slice);
  std::vector<CalibrationChunks> slices;
  slices.reserve(size_t(n_slices));
  for (int64_t i = 0; i < n_slices; ++i) {
    const int64_t first = i * per_slice;
    slices.emplace_back(tokens, o, first, std::min(per_slice, o.n_chunks - first), runner->block_size(),
                        runner->num_groups());
  }
  // The residual stream of every chunk's tokens between layers: [n_chunks x n_ctx][n_embd].
  const int64_t width = model.config().n_embd, slice_floats = per_slice * o.n_ctx * width;
  std::vector<float> stream(size_t(o.n_chunks * o.n_ctx * width)), hidden;
  for (int64_t i = 0; i < n_slices; ++i) {
    runner->embed(slices[size_t(i)].chunks(), hidden);
    std::copy(hidden.begin(), hidden.end(), stream.begin() + std::ptrdiff_t(i * slice_floats));
  }
  runner->set_activation_observer(&observer);
  // A layer has a few dozen inputs at most (latent attention, shared experts): more passes than
  // this means an observer that never lets the layer through.
  constexpr int kMaxPassesPerLayer = 64;
  for (int64_t il = 0; il < model.config().n_layer; ++il) {
    for (int pass = 0;; ++pass) {
      if (pass == kMaxPassesPerLayer) fail("internal: {} calibration made no progress in layer {}", method, il);
      int64_t stopped = 0;
      for (int64_t i = 0; i < n_slices; ++i) {
        const std::span<const SequenceChunk> chunks = slices[size_t(i)].chunks();
        const auto begin = stream.begin() + std::ptrdiff_t(i * slice_floats);
        hidden.assign(begin, begin + std::ptrdiff_t(int64_t(chunks.size()) * o.n_ctx * width));
        try {
          runner->run_layers(chunks, hidden, LayerRange{il, il + 1});
        } catch (const ForwardPassStopped&) {
          ++stopped;
          continue;
        }
        if (stopped > 0) break;  // a slice went through where an earlier one stopped (checked below)
        std::copy(hidden.begin(), hidden.end(), begin);
      }
      // Each slice shows the same inputs in the same order, so all stop, or none.
      if (stopped != 0 && stopped != n_slices) {
        fail("internal: {} calibration: {} of {} slices stopped in layer {}", method, stopped, n_slices, il);
      }
      observer.end_pass(il, stopped > 0);
      if (stopped == 0) break;
    }
  }
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

void release_layer_pages(const Model& model, int64_t layer) {
  for_each_layer_matrix(model.weights().layers[size_t(layer)], [&](const WeightView& v) { model.release_pages(v); });
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
