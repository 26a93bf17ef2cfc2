#include "parallel_options.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "cli_checks.h"
#include "commands.h"
#include "runner/rank_group.h"

namespace kestrel::cli {

void add_weight_memory_options(CLI::App& cmd, WeightMemory& weights) {
  CLI::Option* mmap = cmd.add_flag_callback("--mmap", [&weights] { weights = WeightMemory::Mapped; },
                                            "use the weights in place from the file (page cache, shared between processes)");
  CLI::Option* no_mmap = cmd.add_flag_callback(
      "--no-mmap", [&weights] { weights = WeightMemory::InMemory; },
      "read the weights into memory (huge pages where the kernel gives them; faster MoE decode). Default: in "
      "memory when the file takes at most half the available memory, else mapped");
  mmap->excludes(no_mmap);
}

void add_parallel_options(CLI::App& cmd, ParallelOptions& o, const std::string& pp_flag) {
  add_weight_memory_options(cmd, o.weights);
  ParallelConfig& c = o.config;
  cmd.add_option("--tp", c.tp, "tensor-parallel ranks (launch with mpirun -np TP*PP)")->check(int_range(1, 1024));
  cmd.add_option(pp_flag, c.pp, "pipeline-parallel stages")->check(int_range(1, 1024));
  cmd.add_flag("--tp-deterministic", c.tp_deterministic,
               "tensor-parallel output bitwise equal to one process (gathers instead of all-reduces)");
  cmd.add_option("--collective-timeout", c.timeout_seconds,
                 "seconds a rank waits for the others before the group is ended (default 30)")
      ->check(number_range(0.1, 86400));
  cmd.add_option("--pp-microbatches", c.micro_batches,
                 "pieces each step's batch is cut into for the pipeline (default: one per stage, for steps of 32+ tokens per piece)")
      ->check(int_range(1, 1024));
}

GroupMember join_group(const ParallelOptions& o, const std::string& model_path) {
  GroupMember member;
  member.parallel = ParallelContext::init(o.config);
  ParallelContext& p = *member.parallel;
  ShardRequest request;
  request.tp_size = o.config.tp;
  request.pp_size = o.config.pp;
  request.tp_rank = p.tp_rank();
  request.pp_rank = p.pp_rank();
  request.tp_deterministic = o.config.tp_deterministic;
  try {
    member.model = Model::load(model_path, request, {.weights = o.weights});
  } catch (const Error& e) {
    if (!p.distributed()) throw;
    end_group(p, e);
  }
  if (p.distributed() && p.is_root()) {
    const ModelShard& s = member.model->shard();
    const ModelConfig& c = member.model->config();
    // A MoE model's FFN work is its experts': each expert's channels this rank holds.
    std::string experts;
    for (int64_t il = s.layer_begin; il < s.layer_end && experts.empty(); ++il) {
      const MoeLayerWeights& m = member.model->weights().layers[size_t(il)].moe;
      if (m.has_experts()) experts = fmt::format(", {} of {} channels of each expert", m.n_ff_expert, c.moe.n_ff_expert);
    }
    fmt::print(stderr, "kestrel: {} ranks, {}; rank 0 holds layers {}-{}, {} of {} heads, {} of {} FFN channels{}\n",
               p.world_size(), p.describe(), s.layer_begin, s.layer_end - 1, s.mine().n_head(), c.n_head,
               s.mine().n_ff(), c.n_ff, experts);
  }
  return member;
}

void run_worker_rank(GroupMember& member, int threads, const KvOptions& kv) {
  RunnerConfig config;
  config.num_threads = threads > 0 ? threads : default_thread_count();
  config.kv.k_type = kv.k_type();
  config.kv.v_type = kv.v_type();
  try {
    run_worker(*member.model, *member.parallel, config);
  } catch (const Error& e) {
    end_group(*member.parallel, e);
  }
}

void end_group(ParallelContext& parallel, const std::exception& e) {
  fmt::print(stderr, "kestrel: error on rank {}: {}\n", parallel.world_rank(), e.what());
  std::fflush(stderr);
  parallel.world().abort_group(1);
  std::abort();  // not reached: GCC does not see [[noreturn]] through the virtual call and warns
}

}  // namespace kestrel::cli
