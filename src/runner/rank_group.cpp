#include "runner/rank_group.h"

#include <xxhash.h>

#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/dtype.h"
#include "core/error.h"

#ifndef KESTREL_BUILD_ID
#define KESTREL_BUILD_ID "unknown"
#endif

namespace kestrel {
namespace {

// What every rank must agree on; compared field by field so the error can name it.
struct RankIdentity {
  uint64_t model = 0;
  uint64_t config = 0;
  uint64_t build = 0;
  int64_t k_type = 0, v_type = 0;
  int64_t tp = 0, pp = 0, deterministic = 0;
};
constexpr const char* kFieldNames[] = {"model file (fingerprint)", "model config", "build id",
                                       "K cache type", "V cache type", "--tp", "--pp",
                                       "--tp-deterministic"};
constexpr int kFields = 8;

uint64_t hash_string(const std::string& s, uint64_t seed = 0) { return XXH64(s.data(), s.size(), seed); }

uint64_t config_hash(const ModelConfig& c) {
  const std::string text = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", c.architecture, c.n_vocab, c.n_embd,
                                       c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_ff, c.n_rot,
                                       c.rope_freq_base, c.sliding_window, c.final_logit_softcap);
  return hash_string(text);
}

std::vector<int64_t> fields(const RankIdentity& id) {
  return {int64_t(id.model), int64_t(id.config), int64_t(id.build), id.k_type, id.v_type, id.tp, id.pp,
          id.deterministic};
}

std::string describe_field(int field, int64_t value) {
  if (field == 3 || field == 4) return std::string(kv_type_name(DType(value)));
  if (field <= 2) return fmt::format("{:016x}", uint64_t(value));
  return std::to_string(value);
}

// Rank 0's KV shape, broadcast.
struct KvShape {
  int64_t k_type, v_type, block_size, rotate, rolling_window, sink_tokens, num_groups;
  int64_t group_blocks[8];
};

}  // namespace

uint64_t model_fingerprint(const gguf::GgufFile& file) {
  uint64_t h = 0;
  for (const gguf::KeyValue& kv : file.metadata()) h = hash_string(kv.key, h);
  for (const gguf::TensorInfo& t : file.tensors()) {
    h = hash_string(t.name, h);
    h = XXH64(t.dims.data(), t.dims.size() * sizeof(int64_t), h);
    const int64_t facts[3] = {int64_t(t.type), int64_t(t.offset), int64_t(t.num_bytes)};
    h = XXH64(facts, sizeof(facts), h);
    h = XXH64(t.data, size_t(std::min<uint64_t>(t.num_bytes, 256)), h);
  }
  return h;
}

void exchange_runner_setup(ParallelContext& parallel, const Model& model, RunnerConfig& config) {
  Communicator& world = parallel.world();
  RankIdentity mine;
  mine.model = model_fingerprint(model.file());
  mine.config = config_hash(model.config());
  mine.build = hash_string(KESTREL_BUILD_ID);
  mine.k_type = int64_t(config.kv.k_type);
  mine.v_type = int64_t(config.kv.v_type);
  mine.tp = parallel.config().tp;
  mine.pp = parallel.config().pp;
  mine.deterministic = parallel.config().tp_deterministic ? 1 : 0;
  // Rank 0's identity to everyone; every rank compares; the mismatch table is summed so that every
  // rank knows which rank differs in what, and all fail with the same message.
  RankIdentity root = mine;
  world.broadcast(std::as_writable_bytes(std::span(&root, 1)), 0);
  const std::vector<int64_t> want = fields(root), have = fields(mine);
  std::vector<float> mismatch(size_t(world.size() * kFields), 0.0f);
  for (int f = 0; f < kFields; ++f) {
    if (want[size_t(f)] != have[size_t(f)]) mismatch[size_t(world.rank() * kFields + f)] = 1.0f;
  }
  world.all_reduce_sum(mismatch);
  for (int r = 1; r < world.size(); ++r) {
    for (int f = 0; f < kFields; ++f) {
      if (mismatch[size_t(r * kFields + f)] == 0.0f) continue;
      std::string detail;
      if (r == world.rank()) detail = fmt::format(" ({} here, {} on rank 0)", describe_field(f, have[size_t(f)]),
                                                  describe_field(f, want[size_t(f)]));
      fail("rank {} differs from rank 0 in its {}{}: every rank must run the same build on the same model file "
           "with the same settings",
           r, kFieldNames[f], detail);
    }
  }
  KvShape shape{};
  if (parallel.is_root()) {
    if (config.group_blocks.size() > 8) fail("internal: more than 8 KV-cache groups");
    shape = KvShape{int64_t(config.kv.k_type), int64_t(config.kv.v_type), config.kv.block_size,
                    config.kv.rotate ? 1 : 0, config.kv.rolling_window, config.kv.sink_tokens,
                    int64_t(config.group_blocks.size()), {}};
    std::copy(config.group_blocks.begin(), config.group_blocks.end(), shape.group_blocks);
  }
  world.broadcast(std::as_writable_bytes(std::span(&shape, 1)), 0);
  config.kv.k_type = DType(shape.k_type);
  config.kv.v_type = DType(shape.v_type);
  config.kv.block_size = int(shape.block_size);
  config.kv.rotate = shape.rotate != 0;
  config.kv.rolling_window = shape.rolling_window;
  config.kv.sink_tokens = int(shape.sink_tokens);
  config.group_blocks.assign(shape.group_blocks, shape.group_blocks + shape.num_groups);
}

void run_worker(const Model& model, ParallelContext& parallel, RunnerConfig config) {
  config.parallel = &parallel;
  ModelRunner runner(model, config);  // exchanges the setup with rank 0
  std::vector<std::byte> payload;
  for (;;) {
    StepHeader header;
    // Between requests a worker may wait for hours: no deadline on the next step's arrival.
    parallel.world().broadcast(std::as_writable_bytes(std::span(&header, 1)), 0, /*idle=*/true);
    if (header.kind == StepKind::Stop) return;
    if (header.kind != StepKind::Step || header.payload_bytes > (uint64_t(1) << 32)) {
      fail("a step message from rank 0 is malformed");
    }
    payload.resize(size_t(header.payload_bytes));
    parallel.world().broadcast(payload, 0);
    runner.run_step(decode_forward_batch(payload));
  }
}

}  // namespace kestrel
