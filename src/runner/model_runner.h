// ModelRunner: owns the backend, the paged K/V memory and the activation scratch, and turns a
// list of sequence chunks (one per scheduled request) into one flattened forward batch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/large_buffer.h"
#include "dist/parallel.h"
#include "kv/block_pool.h"
#include "model/forward_batch.h"
#include "model/model.h"
#include "runner/step_message.h"

namespace kestrel {

using TokenId = int32_t;

// Tokens [start_position, start_position + tokens.size()) of one sequence, computed this step.
struct SequenceChunk {
  std::span<const TokenId> tokens;
  int64_t start_position = 0;
  // One block table per KV-cache group; each must cover every position up to the chunk's end
  // (a sliding group's freed entries, -1, lie before its window).
  std::vector<std::span<const BlockId>> block_tables;
  // Logits are produced for chunk tokens with index >= logits_from; -1 for none. A decode or the
  // last chunk of a prompt asks for its last token only (logits_from = tokens.size() - 1).
  int64_t logits_from = -1;
};

// Flattens chunks into a ForwardBatch (positions, per-group slot mapping and block tables, logits
// rows).
ForwardBatch build_forward_batch(std::span<const SequenceChunk> chunks, int block_size, int num_groups);

struct RunnerConfig {
  int num_threads = 2;
  // The KV cache's types, block size, rotation and rolling window; n_kv_head and head_dim are
  // the model's (filled in by the runner).
  KvCacheSpec kv;
  std::vector<int64_t> group_blocks;  // blocks per KV-cache group (see Model::kv_layout)
  // The group of ranks the model is split over (not owned; null or one process: no split). Rank 0
  // broadcasts every batch to the others (rank_group.h runs them) and gets the logits back.
  ParallelContext* parallel = nullptr;
};

// Bytes of a K/V cache of `spec` (n_kv_head, head_dim filled in) with these blocks per group.
int64_t kv_bytes_for(const Model& model, const KvCacheSpec& spec, std::span<const int64_t> group_blocks);

class ModelRunner {
 public:
  // Allocates each group's blocks for the layers in it; a clear error if the KV types do not fit
  // the model or memory runs out. With `shared_backend` (not owned), the runner computes on that
  // backend and its thread pool instead of making its own (a draft model beside its target).
  ModelRunner(const Model& model, const RunnerConfig& config, Backend* shared_backend = nullptr);
  // Rank 0 of a group tells the other ranks to stop.
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // Runs the chunks as one batch. Returns logits [rows][n_vocab] ([rows][head rows] with an output
  // head set), rows in chunk order and, within a chunk, token order. Valid until the next call.
  std::span<float> execute(std::span<const SequenceChunk> chunks);
  std::span<float> execute(const ForwardBatch& batch);
  // This rank's part of one step (every rank of a group runs it with the same batch): pipeline
  // micro-batches through its stage, logits (on rank 0) as execute() returns them.
  std::span<float> run_step(const ForwardBatch& batch);

  // One process only, for a calibration that runs the model layer by layer over slices of its
  // chunks: the chunks' token embeddings [T][n_embd] into `hidden`; then layers `layers` over
  // `hidden` in place (the residual stream after them), the observer (if set) shown their inputs.
  // An observer's ForwardPassStopped passes through (`hidden` then holds a partial state).
  void embed(std::span<const SequenceChunk> chunks, std::vector<float>& hidden);
  void run_layers(std::span<const SequenceChunk> chunks, std::vector<float>& hidden, LayerRange layers);

  // Every later execute() shows the linear layers' inputs to `observer` (not owned; null: none).
  // Throws for a model with act-order matrices (their columns are not in the input's order).
  void set_activation_observer(ActivationObserver* observer);
  // Every later execute(chunks) computes logits with `head` (not owned; null: the model's head),
  // ForwardBatch::head: a draft's head over its most frequent tokens. One process only.
  void set_output_head(const WeightView* head);

  const Model& model() const { return model_; }
  Backend& backend() { return *backend_; }
  int block_size() const { return kv_view_.spec.block_size; }
  int num_groups() const { return int(config_.group_blocks.size()); }
  const KvCacheSpec& kv_spec() const { return kv_view_.spec; }
  const KvLayout& kv_layout() const { return kv_view_.layout; }
  // Bytes of this rank's K/V cache, all its layers and groups.
  int64_t kv_bytes() const;

 private:
  void check_slots(const ForwardBatch& batch) const;  // every K/V slot inside the cache

  const Model& model_;
  RunnerConfig config_;
  std::unique_ptr<Backend> own_backend_;
  Backend* backend_;
  std::vector<LargeBuffer> kv_memory_;  // K and V of each layer (K only with value_in_key)
  KvCacheView kv_view_;
  ForwardScratch scratch_;
  std::vector<float> logits_;
  ActivationObserver* observer_ = nullptr;
  const WeightView* output_head_ = nullptr;
  ParallelContext* parallel_ = nullptr;       // set when the model is split over ranks
  std::vector<std::vector<float>> outgoing_;  // pipeline sends in flight (hidden states, logits)
};

}  // namespace kestrel
