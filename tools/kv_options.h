// KV-cache options shared by run, chat, serve, batch, bench, perplexity and info: the K/V types,
// the Hadamard rotation, and attention sinks over a rolling window (core/kv_spec.h).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "core/dtype.h"

namespace kestrel {
class Model;
struct EngineConfig;
}  // namespace kestrel

namespace kestrel::cli {

struct KvOptions {
  std::string type;    // --kv-type: K and V
  std::string type_k;  // --kv-type-k, --kv-type-v: each on its own (override --kv-type)
  std::string type_v;
  bool rotate = false;
  int sinks = -1;      // --attention-sinks; -1: not given (no rolling window)

  // The parsed types (default f16); a clear error listing the types for an unknown name.
  DType k_type() const;
  DType v_type() const;
  bool streaming() const { return sinks >= 0; }
};

// with_sinks: also --attention-sinks (not for chat, whose turns share the prefix cache, nor info).
void add_kv_options(CLI::App& cmd, KvOptions& o, bool with_sinks = true);

// For run and chat, which size the KV pool from --ctx alone: a clear error when that pool is
// larger than the memory available (--ctx 16777216 would otherwise be an allocation of many GiB
// that fails, or is killed, only when the engine is built).
void check_kv_fits_memory(const Model& model, const EngineConfig& config);

}  // namespace kestrel::cli
