// Engine options shared by `serve` and `batch`: threads, context, KV memory and types, scheduler.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/engine.h"
#include "kv_options.h"
#include "spec_options.h"

namespace kestrel::cli {

struct EngineOptions {
  int threads = 0;
  int64_t ctx = 0;
  int64_t kv_memory_mib = 0;          // 0: kv_memory_fraction of the available memory
  double kv_memory_fraction = 0.9;
  int64_t kv_blocks = 0;
  KvOptions kv;
  int max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  std::string scheduler = "continuous";
  bool no_prefix_caching = false;
  bool keep_window_blocks = false;
  bool no_jump_forward = false;
  SpecOptions spec;  // applied by apply_spec_options (it loads the draft model)
};

void add_engine_options(CLI::App& cmd, EngineOptions& o);
EngineConfig make_engine_config(const EngineOptions& o, const Model& model);
// Sets the config's KV types, rotation and attention sinks from the options.
void apply_kv_options(const KvOptions& kv, EngineConfig& c);

}  // namespace kestrel::cli
