// Compiled only with MPI (KESTREL_WITH_MPI); the portable build has no MPI.
#ifdef KESTREL_WITH_MPI
#include "dist/mpi_communicator.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>

#include <fmt/format.h>

#include "dist/wait_policy.h"

namespace kestrel::dist {
namespace {

// Identifies this machine across network namespaces: the same kernel (boot id) and host name.
std::string machine_key() {
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return fmt::format("{}/{}", host, boot).substr(0, 127);
}

// A process that has exited (or is a zombie its parent has not reaped yet) is dead.
bool process_dead(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() &&
         (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, size_t(length));
}

void check_mpi(int code, const char* what) {
  if (code != MPI_SUCCESS) throw GroupFailure(fmt::format("{}: MPI error: {}", what, mpi_error(code)));
}

std::vector<int> int_counts(std::span<const int64_t> counts, std::vector<int>* displacements) {
  std::vector<int> result;
  int offset = 0;
  for (int64_t c : counts) {
    result.push_back(int(c));
    displacements->push_back(offset);
    offset += int(c);
  }
  return result;
}

// Enough for a 4096-row prefill chunk of a 8192-wide hidden state in two passes; larger reductions
// are chunked, larger gathers go through MPI.
constexpr int64_t kShmCapacityFloats = int64_t(4) << 20;

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, double timeout_seconds, bool use_shm)
    : comm_(comm), timeout_(timeout_seconds) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // Whose liveness this rank can watch: the ranks on this machine.
  struct Peer {
    char key[128];
    int pid;
  };
  Peer mine{};
  const std::string key = machine_key();
  std::memcpy(mine.key, key.data(), key.size());
  mine.pid = int(getpid());
  std::vector<Peer> peers(static_cast<size_t>(size_));
  check_mpi(MPI_Allgather(&mine, sizeof(Peer), MPI_BYTE, peers.data(), sizeof(Peer), MPI_BYTE, comm_),
            "exchanging process ids");
  peer_pids_.assign(size_t(size_), 0);
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && std::strncmp(peers[size_t(r)].key, mine.key, sizeof(mine.key)) == 0) {
      peer_pids_[size_t(r)] = peers[size_t(r)].pid;
    }
  }
  if (!use_shm || size_ == 1) return;
  // Shared memory only when MPI itself places every rank of the group on one node.
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "finding the node");
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  int all_local = node_size == size_ ? 1 : 0;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &all_local, 1, MPI_INT, MPI_MIN, comm_), "finding the node");
  if (!all_local) return;
  const int64_t bytes = ShmGroup::segment_bytes(size_, kShmCapacityFloats);
  void* base = nullptr;
  check_mpi(MPI_Win_allocate_shared(rank_ == 0 ? MPI_Aint(bytes) : 0, 1, MPI_INFO_NULL, comm_, &base, &window_),
            "allocating the shared-memory window");
  MPI_Aint size = 0;
  int unit = 0;
  check_mpi(MPI_Win_shared_query(window_, 0, &size, &unit, &base), "mapping the shared-memory window");
  if (rank_ == 0) std::memset(base, 0, size_t(bytes));
  check_mpi(MPI_Barrier(comm_), "mapping the shared-memory window");
  shm_ = std::make_unique<ShmGroup>(base, rank_, size_, kShmCapacityFloats);
}

MpiCommunicator::~MpiCommunicator() {
  shm_.reset();
  if (window_ != MPI_WIN_NULL) MPI_Win_free(&window_);
  MPI_Comm_free(&comm_);
}

std::string MpiCommunicator::describe() const { return shm_ ? "mpi (shared memory)" : "mpi"; }

void MpiCommunicator::check(const char* what, double start, bool idle) const {
  for (int r = 0; r < size_; ++r) {
    if (peer_pids_[size_t(r)] != 0 && process_dead(peer_pids_[size_t(r)])) {
      throw GroupFailure(fmt::format("{}: rank {} of the group (pid {}) has died", what, r, peer_pids_[size_t(r)]));
    }
  }
  if (!idle && MPI_Wtime() - start > timeout_) {
    throw GroupFailure(fmt::format("{}: no answer from the other ranks for {:.0f} s (--collective-timeout): a rank "
                                   "stopped responding",
                                   what, timeout_));
  }
}

void MpiCommunicator::wait(MPI_Request& request, const char* what, bool idle) {
  const double start = MPI_Wtime();
  double last_check = start;
  WaitPolicy policy;
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    if (policy.pause()) {
      // Liveness checks read /proc: at most every 10 ms.
      const double now = MPI_Wtime();
      if (now - last_check > 0.01) {
        check(what, start, idle);
        last_check = now;
      }
    }
  }
}

void MpiCommunicator::all_reduce_sum(std::span<float> data) {
  if (size_ == 1 || data.empty()) return;
  if (shm_) {
    const double start = MPI_Wtime();
    double last_check = start;
    shm_->all_reduce_sum(data, [&] {
      const double now = MPI_Wtime();
      if (now - last_check > 0.01) {
        check("all-reduce", start, false);
        last_check = now;
      }
    });
    return;
  }
  // MPI's reduction order may differ between ranks; rank order needs the parts themselves: gather
  // them all and add in rank order on every rank (the hidden rows reduced per layer are small).
  std::vector<float> parts(data.size() * size_t(size_));
  std::vector<int64_t> counts(size_t(size_), int64_t(data.size()));
  all_gather(data, parts, counts);
  std::copy_n(parts.data(), data.size(), data.data());
  for (int r = 1; r < size_; ++r) {
    const float* part = parts.data() + size_t(r) * data.size();
    for (size_t i = 0; i < data.size(); ++i) data[i] += part[i];
  }
}

void MpiCommunicator::all_gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t> counts) {
  if (size_ == 1) {
    std::copy(mine.begin(), mine.end(), all.begin());
    return;
  }
  if (shm_) {
    const double start = MPI_Wtime();
    double last_check = start;
    const bool done = shm_->all_gather(mine, all, counts, [&] {
      const double now = MPI_Wtime();
      if (now - last_check > 0.01) {
        check("all-gather", start, false);
        last_check = now;
      }
    });
    if (done) return;
  }
  std::vector<int> displacements;
  const std::vector<int> sizes = int_counts(counts, &displacements);
  MPI_Request request;
  check_mpi(MPI_Iallgatherv(mine.data(), int(mine.size()), MPI_FLOAT, all.data(), sizes.data(), displacements.data(),
                            MPI_FLOAT, comm_, &request),
            "all-gather");
  wait(request, "all-gather");
}

void MpiCommunicator::gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t> counts,
                             int root) {
  if (size_ == 1) {
    std::copy(mine.begin(), mine.end(), all.begin());
    return;
  }
  std::vector<int> displacements;
  const std::vector<int> sizes = int_counts(counts, &displacements);
  MPI_Request request;
  check_mpi(MPI_Igatherv(mine.data(), int(mine.size()), MPI_FLOAT, all.data(), sizes.data(), displacements.data(),
                         MPI_FLOAT, root, comm_, &request),
            "gather");
  wait(request, "gather");
}

void MpiCommunicator::broadcast(std::span<std::byte> data, int root, bool idle) {
  if (size_ == 1 || data.empty()) return;
  MPI_Request request;
  check_mpi(MPI_Ibcast(data.data(), int(data.size()), MPI_BYTE, root, comm_, &request), "broadcast");
  wait(request, "broadcast", idle);
}

void MpiCommunicator::send_async(std::span<const std::byte> data, int dest) {
  MPI_Request& request = sends_.emplace_back();
  check_mpi(MPI_Isend(data.data(), int(data.size()), MPI_BYTE, dest, 0, comm_, &request), "send");
}

void MpiCommunicator::flush_sends() {
  for (MPI_Request& request : sends_) wait(request, "send");
  sends_.clear();
}

void MpiCommunicator::recv(std::span<std::byte> data, int source) {
  MPI_Request request;
  check_mpi(MPI_Irecv(data.data(), int(data.size()), MPI_BYTE, source, 0, comm_, &request), "receive");
  wait(request, "receive");
}

void MpiCommunicator::barrier() {
  MPI_Request request;
  check_mpi(MPI_Ibarrier(comm_, &request), "barrier");
  wait(request, "barrier");
}

void MpiCommunicator::abort_group(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace kestrel::dist
#endif  // KESTREL_WITH_MPI
