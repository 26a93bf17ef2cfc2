#include "engine/awq_calibration.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/format.h"

namespace kestrel {
namespace {

EncodedTensor f32_tensor(const std::vector<float>& v) {
  EncodedTensor t{DType::F32, std::vector<uint8_t>(v.size() * sizeof(float)), "awq"};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

const char* group_name(LinearKind kind) {
  switch (kind) {
    case LinearKind::AttnQ: return "attn_qkv";
    case LinearKind::AttnOutput: return "attn_output";
    case LinearKind::FfnGate: return "ffn_gate_up";
    default: return "ffn_down";
  }
}

// Gathers each input's statistics over every slice of a layer's one pass (the float model runs
// unchanged, so one pass a layer), then scales, clips and encodes the layer's four input groups in
// the order their inputs came.
class AwqLayerScaler : public LayerPassObserver {
 public:
  AwqLayerScaler(const Model& model, const std::map<std::string, DType>& targets, const AwqCalibrationOptions& o,
                 const std::function<void(const AwqGroupReport&)>& on_group)
      : model_(model), targets_(targets), options_(o), on_group_(on_group), pool_(o.pass.num_threads) {}

  void observe(int64_t layer, LinearKind kind, const float* x, int64_t n, int64_t cols) override {
    const std::vector<LinearKind> readers = linear_readers_of(kind);
    if (readers.empty()) return;
    const auto start = std::chrono::steady_clock::now();
    auto it = std::find_if(inputs_.begin(), inputs_.end(), [&](const LayerInput& in) { return in.kind == kind; });
    if (it == inputs_.end()) {
      std::vector<int64_t> groups;
      for (LinearKind k : readers) {
        const int64_t g = clip_group(layer, k);
        if (g > 0 && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
      }
      inputs_.push_back({kind, calib::AwqInputAccumulator(cols, options_.pass.n_chunks * options_.pass.n_ctx,
                                                          std::max<int64_t>(1, options_.search_tokens), groups,
                                                          linear_tensor_name(layer, kind)),
                         0.0});
      it = std::prev(inputs_.end());
    }
    it->stats.add(x, n, pool_);
    it->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  void end_pass(int64_t layer, bool stopped) override {
    if (stopped) fail("internal: AWQ's pass of layer {} stopped", layer);
    for (LayerInput& in : inputs_) scale_group(layer, in.kind, in.stats.finish(pool_), in.seconds);
    inputs_.clear();
    if (!pending_.empty()) fail("internal: AWQ left {} matrices of layer {} unencoded", pending_.size(), layer);
    release_layer_pages(model_, layer);  // no later pass reads this layer's float weights
  }

  std::map<std::string, EncodedTensor>& encoded() { return encoded_; }

 private:
  struct LayerInput {
    LinearKind kind;
    calib::AwqInputAccumulator stats;
    double seconds;  // gathering its statistics
  };

  // The group size matrix k is clipped in (its format's block), or 0 when it is not clipped.
  int64_t clip_group(int64_t layer, LinearKind k) const {
    if (!options_.awq.clip || k == LinearKind::AttnQ || k == LinearKind::AttnK) return 0;
    const DType type = target(layer, k);
    return calib::awq_can_clip(type) ? quant::require_format(type).block_size : 0;
  }

  // The input group read through `kind`: its scales searched on the statistics, folded, its
  // matrices clipped and encoded where final.
  void scale_group(int64_t layer, LinearKind kind, const calib::AwqInputStats& in, double seconds) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<LinearKind> readers = linear_readers_of(kind);
    const LayerWeights& weights = model_.weights().layers[size_t(layer)];
    const int64_t cols = in.cols;
    const std::vector<float>& sq_mean = in.sq_mean;
    std::vector<calib::AwqLinear> linears;
    for (LinearKind k : readers) {
      const WeightView& view = weights.matrix(k);
      pending_[k] = dequantize_matrix(view, pool_);
      linears.push_back({target(layer, k), pending_[k].data(), view.rows});
    }
    const ModelConfig& c = model_.config();
    calib::AwqTying tying;
    if (kind == LinearKind::AttnOutput) tying = {c.n_head, c.n_head_kv, c.head_dim};
    const calib::AwqInput input{cols, in.sample.data(), in.sample_tokens, in.abs_mean, sq_mean, in.abs_max};
    calib::AwqScaleResult scaled;
    if (options_.awq.smooth_alpha >= 0.0) {
      scaled.scales = calib::smoothquant_scales(linears, in.abs_max, tying, options_.awq.smooth_alpha);
    } else if (!options_.awq.smooth_alphas.empty()) {
      scaled = calib::smoothquant_search(linears, input, tying, options_.awq.smooth_alphas, pool_);
    } else if (kind == LinearKind::FfnGate && options_.awq.mlp_output_error) {
      // Measured at the MLP's output, through the float down projection (as AutoAWQ does).
      const std::vector<float> down = dequantize_matrix(weights.matrix(LinearKind::FfnDown), pool_);
      const calib::AwqMlp mlp{down.data(), c.n_embd, c.activation == Activation::GeluTanh, weights.b_gate,
                              weights.b_up};
      scaled = calib::awq_search_scales(linears, input, tying, options_.awq, pool_, &mlp);
    } else {
      scaled = calib::awq_search_scales(linears, input, tying, options_.awq, pool_);
    }
    const std::vector<float>& s = scaled.scales;
    calib::awq_scale_columns(linears, cols, s, pool_);
    std::vector<float> importance(static_cast<size_t>(cols));
    for (int64_t i = 0; i < cols; ++i) importance[size_t(i)] = sq_mean[size_t(i)] / (s[size_t(i)] * s[size_t(i)]);

    AwqGroupReport report{layer, group_name(kind), scaled.grid, options_.awq.n_grid, scaled.loss,
                          scaled.loss_unscaled, {}, 0.0};
    for (size_t i = 0; i < readers.size(); ++i) {
      importance_[readers[i]] = importance;
      const int64_t g = clip_group(layer, readers[i]);
      if (g == 0) continue;
      const calib::AwqClipResult clip =
          calib::awq_clip(linears[i], cols, in.moments.at(g), s, importance, options_.awq, pool_);
      report.clip.groups += clip.groups, report.clip.clipped += clip.clipped;
      report.clip.loss += clip.loss, report.clip.loss_unclipped += clip.loss_unclipped;
    }

    // Fold 1/s into what made the input, and encode what is final.
    const std::string prefix = fmt::format("blk.{}.", layer);
    switch (kind) {
      case LinearKind::AttnQ:
        encoded_[prefix + "attn_norm.weight"] = f32_tensor(divided(weights.attn_norm, s));
        encode(layer, LinearKind::AttnQ);
        encode(layer, LinearKind::AttnK);
        break;
      case LinearKind::AttnOutput: {
        // v's row j * head_dim + d feeds query head h's channel h * head_dim + d for the heads of kv head j.
        const int64_t per_kv = c.n_head / c.n_head_kv;
        std::vector<float> v_scale(size_t(c.kv_width()));
        for (int64_t j = 0; j < c.n_head_kv; ++j) {
          for (int64_t d = 0; d < c.head_dim; ++d) v_scale[size_t(j * c.head_dim + d)] = s[size_t(j * per_kv * c.head_dim + d)];
        }
        divide_rows(pending_.at(LinearKind::AttnV), v_scale);
        if (weights.bv != nullptr) encoded_[prefix + "attn_v.bias"] = f32_tensor(divided(weights.bv, v_scale));
        encode(layer, LinearKind::AttnV);
        encode(layer, LinearKind::AttnOutput);
        break;
      }
      case LinearKind::FfnGate:
        encoded_[prefix + "ffn_norm.weight"] = f32_tensor(divided(weights.ffn_norm, s));
        encode(layer, LinearKind::FfnGate);
        break;
      default:  // FfnDown: its input is act(gate) * up, so 1/s goes into up's rows
        divide_rows(pending_.at(LinearKind::FfnUp), s);
        encode(layer, LinearKind::FfnUp);
        encode(layer, LinearKind::FfnDown);
        break;
    }
    report.seconds = seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (on_group_) on_group_(report);
  }

  DType target(int64_t layer, LinearKind k) const {
    const std::string name = linear_tensor_name(layer, k);
    const auto it = targets_.find(name);
    if (it == targets_.end()) fail("AWQ: no type given for '{}' (AWQ re-encodes every layer matrix)", name);
    return it->second;
  }

  static std::vector<float> divided(const float* v, const std::vector<float>& s) {
    std::vector<float> out(s.size());
    for (size_t i = 0; i < s.size(); ++i) out[i] = v[i] / s[i];
    return out;
  }

  void divide_rows(std::vector<float>& w, const std::vector<float>& s) {
    const int64_t rows = int64_t(s.size()), cols = int64_t(w.size()) / rows;
    pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t i = 0; i < cols; ++i) w[size_t(r * cols + i)] /= s[size_t(r)];
      }
    });
  }

  void encode(int64_t layer, LinearKind k) {
    const std::string name = linear_tensor_name(layer, k);
    const DType type = options_.store_type.value_or(target(layer, k));
    const quant::WeightFormat& f = quant::require_format(type);
    const std::vector<float>& w = pending_.at(k);
    const std::vector<float>& importance = importance_.at(k);
    const int64_t cols = int64_t(importance.size()), rows = int64_t(w.size()) / cols, row_bytes = quant::row_bytes(f, cols);
    EncodedTensor& out = encoded_[name];
    out = {type, std::vector<uint8_t>(size_t(rows * row_bytes)), "awq"};
    pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        quant::quantize_row_with_importance(f, w.data() + r * cols, out.bytes.data() + r * row_bytes, cols,
                                            importance.data());
      }
    });
    pending_.erase(k);
  }

  const Model& model_;
  const std::map<std::string, DType>& targets_;
  const AwqCalibrationOptions& options_;
  const std::function<void(const AwqGroupReport&)>& on_group_;
  ThreadPool pool_;
  std::vector<LayerInput> inputs_;                    // this layer's, in the order they came
  std::map<LinearKind, std::vector<float>> pending_;     // scaled weights not yet encoded
  std::map<LinearKind, std::vector<float>> importance_;  // E[x^2] / s^2 of each matrix's input
  std::map<std::string, EncodedTensor> encoded_;
};

}  // namespace

std::map<std::string, EncodedTensor> awq_quantize_model(const Model& model, std::span<const int32_t> tokens,
                                                        const std::map<std::string, DType>& targets,
                                                        const AwqCalibrationOptions& o,
                                                        const std::function<void(const AwqGroupReport&)>& on_group) {
  const ModelConfig& c = model.config();
  if (c.n_head_kv < 1 || c.n_head % c.n_head_kv != 0) {
    fail("AWQ: {} query heads do not share {} kv heads evenly", c.n_head, c.n_head_kv);
  }
  for (int64_t il = 0; il < c.n_layer; ++il) {
    for (LinearKind k : kLayerLinearKinds) {
      const std::string name = linear_tensor_name(il, k);
      if (targets.count(name) == 0) fail("AWQ: no type given for '{}' (AWQ re-encodes every layer matrix)", name);
    }
  }
  AwqLayerScaler scaler(model, targets, o, on_group);
  run_layerwise_calibration(model, tokens, o.pass, scaler, "AWQ");
  const size_t expected = size_t(c.n_layer) * (7 + 2 + (c.qkv_bias ? 1 : 0));
  if (scaler.encoded().size() != expected) {
    fail("internal: AWQ encoded {} tensors of the {} expected", scaler.encoded().size(), expected);
  }
  return std::move(scaler.encoded());
}

}  // namespace kestrel
