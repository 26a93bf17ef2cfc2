#include "dist/parallel.h"

#include <cstdlib>
#include <string>

#include <fmt/format.h>

#ifdef KESTREL_WITH_MPI
#include <mpi.h>

#include "dist/mpi_communicator.h"
#endif

namespace kestrel {
namespace {

// The world size an MPI launcher announces in the environment (Open MPI, MPICH's Hydra), or 0 when this process was not started by one.
int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::atoi(value);
  }
  return 0;
}

}  // namespace

bool built_with_mpi() {
#ifdef KESTREL_WITH_MPI
  return true;
#else
  return false;
#endif
}

std::unique_ptr<ParallelContext> ParallelContext::single() {
  std::unique_ptr<ParallelContext> context(new ParallelContext());
  context->world_ = std::make_unique<LocalCommunicator>();
  context->tp_ = std::make_unique<LocalCommunicator>();
  context->pp_ = std::make_unique<LocalCommunicator>();
  return context;
}

std::unique_ptr<ParallelContext> ParallelContext::init(const ParallelConfig& config) {
  if (config.tp < 1 || config.pp < 1) fail("--tp and --pp must be at least 1");
  if (!(config.timeout_seconds > 0.0)) fail("--collective-timeout must be positive");
  const int wanted = config.tp * config.pp;
  const int launched = launcher_world_size();
  if (launched <= 1 && wanted == 1) {
    auto context = single();
    context->config_ = config;
    return context;
  }
  if (launched == 0) {
    fail("--tp {} --pp {} needs {} processes: launch it with mpirun -np {} kestrel ... (see README, \"Running "
         "across processes and machines\")",
         config.tp, config.pp, wanted, wanted);
  }
  if (launched != wanted) {
    fail("the launcher started {} ranks but --tp {} x --pp {} needs {}: use mpirun -np {}", launched, config.tp,
         config.pp, wanted, wanted);
  }
#ifdef KESTREL_WITH_MPI
  int provided = 0;
  // The engine thread, not necessarily the main one, makes every MPI call, one at a time.
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    fail("MPI_Init_thread failed");
  }
  std::unique_ptr<ParallelContext> context(new ParallelContext());
  context->owns_mpi_ = true;
  context->config_ = config;
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    fail("the MPI library does not support MPI_THREAD_SERIALIZED");
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != wanted) {
    MPI_Finalize();
    fail("MPI reports {} ranks but --tp {} x --pp {} needs {}", size, config.tp, config.pp, wanted);
  }
  // KESTREL_COMM_SHM=0 sends every collective through MPI (benchmarks compare the two).
  const char* shm_env = std::getenv("KESTREL_COMM_SHM");
  const bool use_shm = shm_env == nullptr || std::string(shm_env) != "0";
  const int pp_rank = rank / config.tp, tp_rank = rank % config.tp;
  MPI_Comm world = MPI_COMM_NULL, tp = MPI_COMM_NULL, pp = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  MPI_Comm_split(MPI_COMM_WORLD, pp_rank, tp_rank, &tp);
  MPI_Comm_split(MPI_COMM_WORLD, tp_rank, pp_rank, &pp);
  context->world_ = std::make_unique<dist::MpiCommunicator>(world, config.timeout_seconds, false);
  context->tp_ = std::make_unique<dist::MpiCommunicator>(tp, config.timeout_seconds, use_shm);
  context->pp_ = std::make_unique<dist::MpiCommunicator>(pp, config.timeout_seconds, false);
  return context;
#else
  fail("this build of kestrel has no MPI (install libopenmpi-dev and rebuild) so it cannot run --tp {} --pp {}",
       config.tp, config.pp);
#endif
}

ParallelContext::~ParallelContext() {
  world_.reset();
  tp_.reset();
  pp_.reset();
#ifdef KESTREL_WITH_MPI
  if (owns_mpi_) MPI_Finalize();
#endif
}

std::string ParallelContext::describe() const {
  return fmt::format("tp {} x pp {} over {}", config_.tp, config_.pp,
                     config_.tp > 1 ? tp_->describe() : world_->describe());
}

void LocalCommunicator::all_gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t>) {
  std::copy(mine.begin(), mine.end(), all.begin());
}

void LocalCommunicator::gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t>, int) {
  std::copy(mine.begin(), mine.end(), all.begin());
}

void LocalCommunicator::send_async(std::span<const std::byte>, int) { fail("internal: send in a group of one"); }
void LocalCommunicator::recv(std::span<std::byte>, int) { fail("internal: receive in a group of one"); }
void LocalCommunicator::abort_group(int code) { std::_Exit(code); }

}  // namespace kestrel
