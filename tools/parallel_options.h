// Running one model over several processes (dist/parallel.h) from the CLI: --tp, --pp and their
// knobs for run, serve, bench and perplexity; joining the job and loading this rank's shard (with
// --mmap / --no-mmap); the headless ranks' side; and fail-stop: any error on any rank ends the whole
// job with status 1.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "dist/parallel.h"
#include "kv_options.h"
#include "model/model.h"

namespace kestrel::cli {

struct ParallelOptions {
  ParallelConfig config;
  WeightMemory weights = WeightMemory::Auto;  // --mmap / --no-mmap
};

// --mmap and --no-mmap (llama.cpp's names): the weights mapped from the file, or read into memory
// (model.h's WeightMemory); neither: Auto.
void add_weight_memory_options(CLI::App& cmd, WeightMemory& weights);

// `pp_flag`: the pipeline option's name (bench's --pp is llama-bench's prompt size, so there it is
// --pipeline-parallel).
void add_parallel_options(CLI::App& cmd, ParallelOptions& o, const std::string& pp_flag = "--pp");

// This process's place in the job and its shard of the model.
struct GroupMember {
  std::unique_ptr<ParallelContext> parallel;
  std::unique_ptr<Model> model;
  bool is_root() const { return parallel->is_root(); }
};

// Joins the job (a clear error without mpirun, or with the wrong number of ranks) and loads the
// shard; prints the split on rank 0.
GroupMember join_group(const ParallelOptions& o, const std::string& model_path);

// A rank other than 0: runs rank 0's steps until it stops. `threads` 0: the CPUs this rank may use.
void run_worker_rank(GroupMember& member, int threads, const KvOptions& kv);

// Runs rank 0's command. In a group, an error (a rank died, a mismatch, a bad request that ends the
// command) is printed and ends every rank with status 1 rather than leaving the others waiting.
template <typename Body>
void run_root_rank(GroupMember& member, Body&& body);

[[noreturn]] void end_group(ParallelContext& parallel, const std::exception& e);

template <typename Body>
void run_root_rank(GroupMember& member, Body&& body) {
  if (!member.parallel->distributed()) {
    body();
    return;
  }
  try {
    body();
  } catch (const Error& e) {
    end_group(*member.parallel, e);
  }
}

}  // namespace kestrel::cli
