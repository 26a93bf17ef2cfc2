#include "server_options.h"

#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"

namespace kestrel::cli {

void add_engine_options(CLI::App& cmd, EngineOptions& o) {
  cmd.add_option("-t,--threads", o.threads, "compute threads (default: the available CPUs)")->check(int_range(1, 1024));
  cmd.add_option("-c,--ctx", o.ctx, "context length per request (default: the model's)")->check(int_range(2, 1 << 24));
  cmd.add_option("--kv-memory-mib", o.kv_memory_mib,
                 "KV-cache memory, MiB (default: --kv-memory-fraction of the memory available at start)")
      ->check(int_range(1, 1 << 24));
  cmd.add_option("--kv-memory-fraction", o.kv_memory_fraction,
                 "share of the available memory (less weights and activations) the KV cache takes when "
                 "--kv-memory-mib is not given")
      ->check(number_range(0.01, 1.0));
  cmd.add_option("--kv-blocks", o.kv_blocks, "KV-cache blocks (overrides --kv-memory-mib)")->check(int_range(1, 1 << 30));
  cmd.add_option("--max-num-seqs", o.max_num_seqs, "sequences per step")->check(int_range(1, 4096));
  cmd.add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "tokens per step")->check(int_range(1, 1 << 20));
  cmd.add_option("--scheduler", o.scheduler, "continuous (default) or static (whole batches, for comparison)")
      ->check(CLI::IsMember({"continuous", "static"}));
  cmd.add_flag("--no-prefix-caching", o.no_prefix_caching, "do not reuse KV blocks of shared prefixes");
  cmd.add_flag("--no-jump-forward", o.no_jump_forward,
               "structured output: do not verify the tokens a grammar forces as drafts (one pass for several tokens)");
  // Sliding-window layers normally free the blocks that leave the window, and the prefix cache
  // then stays off (a hit would need those blocks). Keeping them trades KV memory for reuse.
  cmd.add_flag("--keep-window-blocks", o.keep_window_blocks,
               "keep sliding-window layers' out-of-window KV blocks, so that prefix caching also "
               "works for models with sliding-window attention (Gemma 3, Mistral); costs KV memory");
  add_kv_options(cmd, o.kv);
  add_spec_options(cmd, o.spec);
}

void apply_kv_options(const KvOptions& kv, EngineConfig& c) {
  c.kv_type_k = kv.k_type();
  c.kv_type_v = kv.v_type();
  c.kv_rotate = kv.rotate;
  c.attention_sinks = kv.sinks;
}

EngineConfig make_engine_config(const EngineOptions& o, const Model& model) {
  EngineConfig c;
  c.num_threads = o.threads > 0 ? o.threads : default_thread_count();
  c.max_model_len = o.ctx > 0 ? o.ctx : model.config().n_ctx_train;
  c.kv_memory_bytes = o.kv_memory_mib << 20;
  c.kv_memory_fraction = o.kv_memory_fraction;
  apply_kv_options(o.kv, c);
  c.num_kv_blocks = o.kv_blocks;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.policy = o.scheduler == "static" ? SchedulingPolicy::Static : SchedulingPolicy::Continuous;
  c.enable_prefix_caching = !o.no_prefix_caching;
  c.grammar_jump_forward = !o.no_jump_forward;
  c.free_out_of_window_blocks = !o.keep_window_blocks;
  return c;
}

}  // namespace kestrel::cli
