// Communicator over an MPI communicator (Open MPI or MPICH): non-blocking MPI calls polled under
// the group's deadline, and, when every rank of the group shares a host, all-reduce and all-gather
// through a shared-memory window (shm_group.h) instead of MPI's messages. Built only with MPI.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/shm_group.h"

namespace kestrel::dist {

class MpiCommunicator final : public Communicator {
 public:
  // Collective over `comm` (taken over, freed with this). `use_shm`: allowed to use shared memory
  // when MPI says every rank of the group is on this host.
  MpiCommunicator(MPI_Comm comm, double timeout_seconds, bool use_shm);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(std::span<float> data) override;
  void all_gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t> counts) override;
  void gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t> counts, int root) override;
  void broadcast(std::span<std::byte> data, int root, bool idle) override;
  void send_async(std::span<const std::byte> data, int dest) override;
  void flush_sends() override;
  void recv(std::span<std::byte> data, int source) override;
  void barrier() override;
  [[noreturn]] void abort_group(int code) override;
  std::string describe() const override;

 private:
  // Polls `request` to completion; throws GroupFailure past the deadline (unless idle) or when a
  // peer on this machine has died.
  void wait(MPI_Request& request, const char* what, bool idle = false);
  // Throws GroupFailure if the collective `what` began at `start` is overdue or a peer died.
  void check(const char* what, double start, bool idle) const;

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  double timeout_;
  std::vector<MPI_Request> sends_;  // started by send_async, completed by flush_sends
  std::vector<int> peer_pids_;  // pid of each rank when it runs on this machine, else 0
  MPI_Win window_ = MPI_WIN_NULL;
  std::unique_ptr<ShmGroup> shm_;
};

}  // namespace kestrel::dist
