#include "runner/model_runner.h"

#include <algorithm>
#include <new>

#include <fmt/format.h>

#include "core/error.h"
#include "runner/rank_group.h"

namespace kestrel {

ForwardBatch build_forward_batch(std::span<const SequenceChunk> chunks, int block_size, int num_groups) {
  ForwardBatch batch;
  int64_t total = 0;
  for (const SequenceChunk& c : chunks) {
    total += int64_t(c.tokens.size());
    if (int(c.block_tables.size()) != num_groups) {
      fail("internal: a sequence chunk has {} block tables for {} KV-cache groups", c.block_tables.size(), num_groups);
    }
  }
  batch.token_ids.reserve(size_t(total));
  batch.positions.reserve(size_t(total));
  batch.token_seq.reserve(size_t(total));
  batch.kv_groups.resize(size_t(num_groups));
  for (int g = 0; g < num_groups; ++g) {
    KvGroupBatch& group = batch.kv_groups[size_t(g)];
    size_t max_blocks = 1;
    for (const SequenceChunk& c : chunks) max_blocks = std::max(max_blocks, c.block_tables[size_t(g)].size());
    group.max_blocks_per_seq = int32_t(max_blocks);
    group.block_tables.assign(chunks.size() * max_blocks, -1);
    group.slot_mapping.reserve(size_t(total));
  }
  for (size_t s = 0; s < chunks.size(); ++s) {
    const SequenceChunk& c = chunks[s];
    const int64_t end = c.start_position + int64_t(c.tokens.size());
    for (int g = 0; g < num_groups; ++g) {
      const std::span<const BlockId> table = c.block_tables[size_t(g)];
      if (end > int64_t(table.size()) * block_size) {
        fail("internal: sequence chunk ends at {} but its blocks hold {} tokens", end,
             table.size() * size_t(block_size));
      }
      KvGroupBatch& group = batch.kv_groups[size_t(g)];
      std::copy(table.begin(), table.end(), group.block_tables.begin() + std::ptrdiff_t(s * size_t(group.max_blocks_per_seq)));
      for (int64_t position = c.start_position; position < end; ++position) {
        const BlockId block = table[size_t(position / block_size)];
        if (block < 0) fail("internal: position {} falls in a freed KV block", position);
        group.slot_mapping.push_back(int64_t(block) * block_size + position % block_size);
      }
    }
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      if (c.logits_from >= 0 && int64_t(i) >= c.logits_from) {
        batch.logits_indices.push_back(int32_t(batch.token_ids.size()));
      }
      batch.token_ids.push_back(c.tokens[i]);
      batch.positions.push_back(int32_t(c.start_position + int64_t(i)));
      batch.token_seq.push_back(int32_t(s));
    }
  }
  return batch;
}

ModelRunner::ModelRunner(const Model& model, const RunnerConfig& config, Backend* shared_backend)
    : model_(model),
      config_(config),
      own_backend_(shared_backend != nullptr ? nullptr : make_cpu_backend(config.num_threads)),
      backend_(shared_backend != nullptr ? shared_backend : own_backend_.get()) {
  const ModelConfig& c = model.config();
  if (config.parallel != nullptr && config.parallel->distributed()) {
    parallel_ = config.parallel;
    // Every rank agrees on the model and build; the others take rank 0's KV shape.
    exchange_runner_setup(*parallel_, model, config_);
  }
  KvCacheSpec spec = config_.kv;
  spec.n_kv_head = model.local_kv_heads();
  spec.head_dim = c.head_dim;
  spec.value_in_key = c.mla.enabled();
  validate_kv_spec(spec);
  const KvLayout layout = model.kv_layout(spec.rolling_window, spec.sink_tokens);
  if (config_.group_blocks.size() != layout.group_windows.size()) {
    fail("internal: {} KV block counts for a model with {} KV-cache groups", config_.group_blocks.size(),
         layout.group_windows.size());
  }
  for (int64_t blocks : config_.group_blocks) {
    if (blocks <= 0) fail("the KV cache needs at least one block per group");
  }
  kv_view_.spec = spec;
  kv_view_.layout = layout;
  kv_view_.num_blocks = config_.group_blocks;
  const int64_t k_layer_block = spec.block_size * spec.n_kv_head * spec.k_row_bytes();
  const int64_t v_layer_block = spec.block_size * spec.n_kv_head * spec.v_row_bytes();
  try {
    for (int64_t il = 0; il < c.n_layer; ++il) {
      // A pipeline stage holds its own layers' K/V only.
      if (!model.shard().holds_layer(il)) {
        kv_view_.layers.emplace_back();
        continue;
      }
      const int64_t blocks = config_.group_blocks[size_t(layout.layer_group[size_t(il)])];
      // Never touched here: pages are only faulted in as blocks are first written.
      KvLayerView view;
      view.k_type = spec.k_type;
      view.v_type = spec.v_type;
      kv_memory_.emplace_back(size_t(blocks * k_layer_block));
      view.k = kv_memory_.back().data();
      if (spec.value_in_key) {
        view.v = view.k;  // V rows are K's (the forward pass writes the same row to both)
      } else {
        kv_memory_.emplace_back(size_t(blocks * v_layer_block));
        view.v = kv_memory_.back().data();
      }
      view.num_slots = blocks * spec.block_size;
      view.n_kv_head = int(spec.n_kv_head);
      view.k_row_bytes = spec.k_row_bytes();
      view.v_row_bytes = spec.v_row_bytes();
      kv_view_.layers.push_back(view);
    }
  } catch (const std::bad_alloc&) {
    fail("out of memory: the KV cache ({} blocks of {} tokens per group, {}) needs {:.1f} MiB; use "
         "fewer blocks, a smaller KV type or a shorter context",
         fmt::join(config_.group_blocks, "/"), spec.block_size, spec.describe(),
         double(kv_bytes_for(model, spec, config_.group_blocks)) / (1 << 20));
  }
}

ModelRunner::~ModelRunner() {
  if (parallel_ == nullptr || !parallel_->is_root()) return;
  try {
    StepHeader stop{StepKind::Stop, 0};
    parallel_->world().broadcast(std::as_writable_bytes(std::span(&stop, 1)), 0);
  } catch (const std::exception&) {
    // The group is already broken; whoever saw it fails the process.
  }
}

int64_t kv_bytes_for(const Model& model, const KvCacheSpec& spec, std::span<const int64_t> group_blocks) {
  const KvLayout layout = model.kv_layout(spec.rolling_window, spec.sink_tokens);
  int64_t bytes = 0;
  for (size_t il = 0; il < layout.layer_group.size(); ++il) {
    if (model.shard().holds_layer(int64_t(il))) bytes += group_blocks[size_t(layout.layer_group[il])] * spec.block_bytes();
  }
  return bytes;
}

int64_t ModelRunner::kv_bytes() const { return kv_bytes_for(model_, kv_view_.spec, config_.group_blocks); }

std::span<float> ModelRunner::execute(std::span<const SequenceChunk> chunks) {
  ForwardBatch batch = build_forward_batch(chunks, block_size(), num_groups());
  batch.head = output_head_;
  return execute(batch);
}

void ModelRunner::embed(std::span<const SequenceChunk> chunks, std::vector<float>& hidden) {
  if (parallel_ != nullptr) fail("internal: a layer-by-layer run needs the whole model in one process");
  const ForwardBatch batch = build_forward_batch(chunks, block_size(), num_groups());
  LocalCommunicator local;
  model_.embed(*backend_, batch, scratch_, local);
  hidden.swap(scratch_.hidden);
}

void ModelRunner::run_layers(std::span<const SequenceChunk> chunks, std::vector<float>& hidden, LayerRange layers) {
  if (parallel_ != nullptr) fail("internal: a layer-by-layer run needs the whole model in one process");
  const ForwardBatch batch = build_forward_batch(chunks, block_size(), num_groups());
  check_slots(batch);
  LocalCommunicator local;
  scratch_.hidden.swap(hidden);
  try {
    model_.run_layers(*backend_, batch, kv_view_, scratch_, local, observer_, layers);
  } catch (...) {
    scratch_.hidden.swap(hidden);
    throw;
  }
  scratch_.hidden.swap(hidden);
}

void ModelRunner::set_activation_observer(ActivationObserver* observer) {
  if (observer != nullptr) {
    if (const std::string m = model_.input_ordered_matrix(); !m.empty()) {
      fail("{}: calibration (imatrix, GPTQ, AWQ) does not support act-order matrices (input_order) yet: {}",
           model_.file().name(), m);
    }
  }
  observer_ = observer;
}

void ModelRunner::set_output_head(const WeightView* head) {
  if (head != nullptr && parallel_ != nullptr) fail("an output head over part of the vocabulary needs the whole model in one process");
  output_head_ = head;
}

std::span<float> ModelRunner::execute(const ForwardBatch& batch) {
  if (parallel_ != nullptr) {
    // Every rank runs the same step: the batch goes out first.
    std::vector<std::byte> payload = encode_forward_batch(batch);
    StepHeader header{StepKind::Step, uint64_t(payload.size())};
    parallel_->world().broadcast(std::as_writable_bytes(std::span(&header, 1)), 0);
    parallel_->world().broadcast(payload, 0);
  }
  return run_step(batch);
}

void ModelRunner::check_slots(const ForwardBatch& batch) const {
  for (size_t g = 0; g < batch.kv_groups.size(); ++g) {
    for (int64_t slot : batch.kv_groups[g].slot_mapping) {
      if (slot < 0 || slot >= kv_view_.num_blocks[g] * block_size()) {
        fail("internal: KV slot {} outside the cache", slot);
      }
    }
  }
}

std::span<float> ModelRunner::run_step(const ForwardBatch& batch) {
  check_slots(batch);
  const int64_t n_vocab = model_.config().n_vocab;
  if (parallel_ == nullptr) {
    logits_.resize(batch.logits_indices.size() * size_t(batch.head != nullptr ? batch.head->rows : n_vocab));
    model_.forward(*backend_, batch, kv_view_, scratch_, logits_.data(), observer_);
    return std::span<float>(logits_);
  }
  if (observer_ != nullptr) fail("activation observers need the whole model in one process");
  logits_.resize(batch.logits_indices.size() * size_t(n_vocab));
  const ModelShard& sh = model_.shard();
  Communicator& tp = parallel_->tp();
  Communicator& pp = parallel_->pp();
  const int64_t T = batch.num_tokens();
  const int64_t n_embd = model_.config().n_embd;
  // Pipeline micro-batches: consecutive token ranges. Each stage runs them in order, so a later
  // piece's attention finds the earlier pieces' K/V in the cache; stage s works on piece m while
  // stage s+1 works on piece m-1. Logits rows must come in token order to be cut so.
  int64_t pieces = 1;
  if (sh.pp_size > 1 && std::is_sorted(batch.logits_indices.begin(), batch.logits_indices.end())) {
    // By default only a step with enough tokens is cut: every piece reads the stage's weights
    // again, so a small (decode) step, which the weight reads bound, would get slower, not faster.
    constexpr int64_t kMinTokensPerPiece = 32;
    const int explicit_pieces = parallel_->config().micro_batches;
    const int64_t wanted = explicit_pieces > 0 ? explicit_pieces : std::min<int64_t>(sh.pp_size, T / kMinTokensPerPiece);
    pieces = std::max<int64_t>(1, std::min<int64_t>(wanted, T));
  }
  outgoing_.resize(size_t(pieces));
  std::vector<int64_t> piece_rows;  // logits rows of each piece
  float* logits_out = logits_.data();
  for (int64_t m = 0; m < pieces; ++m) {
    const int64_t begin = T * m / pieces, end = T * (m + 1) / pieces;
    const ForwardBatch piece = pieces == 1 ? ForwardBatch() : slice_forward_batch(batch, begin, end);
    const ForwardBatch& b = pieces == 1 ? batch : piece;
    const int64_t rows = int64_t(b.logits_indices.size());
    piece_rows.push_back(rows);
    if (sh.first_stage()) {
      model_.embed(*backend_, b, scratch_, tp);
    } else {
      scratch_.hidden.resize(size_t((end - begin) * n_embd));
      pp.recv(std::as_writable_bytes(std::span(scratch_.hidden)), sh.pp_rank - 1);
    }
    model_.run_layers(*backend_, b, kv_view_, scratch_, tp);
    std::vector<float>& out = outgoing_[size_t(m)];
    if (!sh.last_stage()) {
      out = scratch_.hidden;
      pp.send_async(std::as_bytes(std::span(out)), sh.pp_rank + 1);
    } else if (sh.first_stage()) {
      model_.head(*backend_, b, scratch_, logits_out, tp);
      logits_out += rows * n_vocab;
    } else {
      out.resize(size_t(rows * n_vocab));
      model_.head(*backend_, b, scratch_, out.data(), tp);
      // The last stage's tensor-parallel rank 0 holds the gathered logits: to rank 0.
      if (tp.rank() == 0 && rows > 0) pp.send_async(std::as_bytes(std::span(out)), 0);
    }
  }
  if (parallel_->is_root() && !sh.last_stage()) {
    for (int64_t rows : piece_rows) {
      if (rows == 0) continue;
      pp.recv(std::as_writable_bytes(std::span(logits_out, size_t(rows * n_vocab))), sh.pp_size - 1);
      logits_out += rows * n_vocab;
    }
  }
  pp.flush_sends();
  return std::span<float>(logits_);
}

}  // namespace kestrel
