// Engine options shared by `serve`, `batch` and `bench`: threads, context, KV memory, scheduler.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/engine.h"

namespace kestrel::cli {

struct EngineOptions {
  int threads = 0;
  int64_t ctx = 0;
  int64_t kv_memory_mib = 256;
  int64_t kv_blocks = 0;
  int max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  std::string scheduler = "continuous";
  bool no_prefix_caching = false;
  bool keep_window_blocks = false;
};

void add_engine_options(CLI::App& cmd, EngineOptions& o);
EngineConfig make_engine_config(const EngineOptions& o, const Model& model);

}  // namespace kestrel::cli
