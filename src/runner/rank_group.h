// Starting a group of ranks on one model, and the headless ranks' loop. At start every rank
// compares what it loaded and how it was built against rank 0 (model fingerprint, config, KV
// types, build id, parallel sizes): a mismatch is the same named error on every rank, so the whole
// group ends at once instead of computing garbage. Rank 0 then sends its KV cache's shape (block
// counts depend on its memory budget), which every rank allocates for its own heads and layers.
#pragma once

#include <cstdint>

#include "dist/parallel.h"
#include "runner/model_runner.h"

namespace kestrel {

// A fingerprint of the model file: its metadata keys, tensor table and the first bytes of every
// tensor (not the whole file: a rank reads its shard only).
uint64_t model_fingerprint(const gguf::GgufFile& file);

// Collective over the world. On rank 0 `config` is what it will run with; on the others it is the
// rank's own view (threads, KV types from its command line) and comes back as rank 0's KV shape
// with the rank's thread count. Throws kestrel::Error naming the first mismatch on every rank.
void exchange_runner_setup(ParallelContext& parallel, const Model& model, RunnerConfig& config);

// A headless rank: sets up its runner from rank 0's shape, then runs every step rank 0 sends until
// rank 0 stops. Returns normally on Stop; throws GroupFailure when the group breaks.
void run_worker(const Model& model, ParallelContext& parallel, RunnerConfig config);

}  // namespace kestrel
