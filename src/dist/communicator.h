// The Communicator seam: the collectives one group of ranks (a tensor-parallel group, a pipeline,
// the whole world) performs together. The forward pass and the runner see only this interface;
// MPI (mpi_communicator.h) and the one-process LocalCommunicator implement it, and a CUDA backend
// would add NCCL behind it.
//
// Every rank of a group calls the same collectives in the same order with the same sizes. Every
// wait is bounded by the group's timeout (a rank that stopped answering) and watches for ranks that
// died: either ends in a GroupFailure on this rank, never in a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/error.h"

namespace kestrel {

// The group can no longer compute: a rank died or stopped answering. Fail-stop: whoever catches
// it ends the requests in flight and the process (core/error.h's Error, so messages propagate).
class GroupFailure : public Error {
 public:
  explicit GroupFailure(const std::string& message) : Error(message) {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Sums `data` over the group, in place. Every rank gets bitwise the same result: the ranks'
  // contributions are added in rank order, ((x0 + x1) + x2) + ...
  virtual void all_reduce_sum(std::span<float> data) = 0;
  // Concatenates every rank's `mine` (counts[r] floats from rank r) in rank order into `all`, on
  // every rank. counts.size() == size(), mine.size() == counts[rank()], all.size() == sum(counts).
  virtual void all_gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t> counts) = 0;
  // The same onto `root` only; `all` is not touched elsewhere.
  virtual void gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t> counts,
                      int root) = 0;
  // Copies root's `data` into every rank's. With `idle` the wait has no deadline: a worker waiting
  // for the next step while the server has nothing to do.
  virtual void broadcast(std::span<std::byte> data, int root, bool idle = false) = 0;
  // Point to point (pipeline stages). send_async starts the transfer and returns: `data` must stay
  // unchanged until flush_sends(), which waits for every send started. Sends never block, so
  // stages that send before they receive cannot deadlock. recv returns once `data` has arrived.
  virtual void send_async(std::span<const std::byte> data, int dest) = 0;
  virtual void flush_sends() = 0;
  virtual void recv(std::span<std::byte> data, int source) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the whole job at once, with `code` (MPI_Abort); in one process: exit.
  [[noreturn]] virtual void abort_group(int code) = 0;
  // "mpi (shared memory)", "mpi (tcp)", "local": for start-up messages and benchmarks.
  virtual std::string describe() const = 0;
};

// A group of one: every collective is a copy or nothing.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(std::span<float>) override {}
  void all_gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t>) override;
  void gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t>, int) override;
  void broadcast(std::span<std::byte>, int, bool) override {}
  void send_async(std::span<const std::byte>, int) override;
  void flush_sends() override {}
  void recv(std::span<std::byte>, int) override;
  void barrier() override {}
  [[noreturn]] void abort_group(int code) override;
  std::string describe() const override { return "local"; }
};

}  // namespace kestrel
