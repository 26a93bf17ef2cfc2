// How one model is split over processes: tensor parallelism (each rank owns some heads and FFN
// channels of every layer) times pipeline parallelism (each stage owns a range of layers), and the
// communicators of the groups that result. World rank = pp_rank * tp + tp_rank, so a tensor-parallel
// group is consecutive ranks: on one host under mpirun's default by-slot placement.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace kestrel {

struct ParallelConfig {
  int tp = 1;
  int pp = 1;
  // Row-parallel layers (attention output, FFN down) split by output rows over gathered inputs
  // instead of by input columns with an all-reduce: every sum is taken in one process in the
  // single-process order, so output is bitwise equal to --tp 1, at the cost of two all-gathers.
  bool tp_deterministic = false;
  // A collective that waits longer than this for a rank ends the group (a stopped rank).
  double timeout_seconds = 30.0;
  // Pieces each step's batch is cut into so pipeline stages work at once (0: --pp of them when the
  // step has at least 32 tokens per piece, else fewer: a decode step is bound by the weight reads,
  // which every piece repeats).
  int micro_batches = 0;
};

class ParallelContext {
 public:
  // Joins the job this process was launched into. Without an MPI launcher (no mpirun), tp = pp = 1
  // gives one process and anything else is an error telling how to launch; under one, the world
  // size must be tp x pp (every rank checks and fails alike, before any rank waits on another).
  static std::unique_ptr<ParallelContext> init(const ParallelConfig& config);
  // One process, no MPI: for tests and tools that never split a model.
  static std::unique_ptr<ParallelContext> single();
  ~ParallelContext();

  const ParallelConfig& config() const { return config_; }
  int world_rank() const { return world_->rank(); }
  int world_size() const { return world_->size(); }
  int tp_rank() const { return tp_->rank(); }
  int pp_rank() const { return pp_->rank(); }
  bool distributed() const { return world_->size() > 1; }
  // Rank 0 tokenizes, schedules, samples and serves; every other rank is a headless worker.
  bool is_root() const { return world_->rank() == 0; }
  Communicator& world() const { return *world_; }
  Communicator& tp() const { return *tp_; }
  Communicator& pp() const { return *pp_; }
  // "tp 2 x pp 1 over mpi (shared memory)", for start-up lines.
  std::string describe() const;

 private:
  ParallelContext() = default;
  ParallelConfig config_;
  std::unique_ptr<Communicator> world_, tp_, pp_;
  bool owns_mpi_ = false;
};

// True when this build can run under MPI (found at configure time).
bool built_with_mpi();

}  // namespace kestrel
