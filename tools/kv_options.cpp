#include "kv_options.h"

#include <fmt/format.h>

#include "cli_checks.h"
#include "core/error.h"
#include "core/kv_spec.h"
#include "core/memory_info.h"
#include "engine/kv_capacity.h"

namespace kestrel::cli {

DType KvOptions::k_type() const {
  return parse_kv_type(!type_k.empty() ? type_k : !type.empty() ? type : "f16");
}
DType KvOptions::v_type() const {
  return parse_kv_type(!type_v.empty() ? type_v : !type.empty() ? type : "f16");
}

void add_kv_options(CLI::App& cmd, KvOptions& o, bool with_sinks) {
  const std::string types = kv_type_list();
  cmd.add_option("--kv-type", o.type, "KV-cache type of K and V: " + types + " (default f16)");
  cmd.add_option("--kv-type-k", o.type_k, "KV-cache type of K alone (overrides --kv-type)");
  cmd.add_option("--kv-type-v", o.type_v, "KV-cache type of V alone (overrides --kv-type)");
  cmd.add_flag("--kv-rotate", o.rotate,
               "Hadamard-rotate K and Q per head before K is cached (helps q4_0/q8_0 K; head size a "
               "power of two)");
  if (with_sinks) {
    cmd.add_option("--attention-sinks", o.sinks,
                   "stream past the context: keep the first N tokens' K/V plus the most recent ones "
                   "(--ctx in all) so a sequence runs on with bounded memory (StreamingLLM); 0 keeps "
                   "the recent window alone")
        ->check(int_range(0, 1 << 20));
  }
}

void check_kv_fits_memory(const Model& model, const EngineConfig& config) {
  KvCapacity capacity;
  resolve_kv_group_blocks(model, config, &capacity);
  const int64_t available = available_memory_bytes();
  if (available > 0 && capacity.bytes > available) {
    fail("a context of {} tokens needs {} of KV cache ({} per token), more than the {} of memory available: "
         "give a smaller --ctx",
         config.max_model_len, human_bytes(double(capacity.bytes)), human_bytes(double(capacity.bytes_per_token)),
         human_bytes(double(available)));
  }
}

}  // namespace kestrel::cli
