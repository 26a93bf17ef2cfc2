// Collectives over shared memory for the ranks of one host (tensor-parallel ranks on one machine or
// socket): each rank copies its part into its own slot of a segment every rank maps, publishes a
// sequence number, and reads the others' slots once their numbers arrive. No message passing, no
// copies through the MPI library: a hidden row's all-reduce costs a few cache-line transfers.
// Slots are double-buffered by the sequence number's parity: call g writes the buffers call g-2
// used, which every rank has finished reading, since each passed call g-1's wait.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>

namespace kestrel::dist {

class ShmGroup {
 public:
  // `base` is a segment of segment_bytes(size, capacity) bytes that every rank maps, zeroed before
  // any rank's first call.
  ShmGroup(void* base, int rank, int size, int64_t capacity_floats);
  static int64_t segment_bytes(int size, int64_t capacity_floats);

  // `check` runs now and then while waiting (deadline, peers alive) and throws to give up.
  void all_reduce_sum(std::span<float> data, const std::function<void()>& check);
  // Returns false (and does nothing) when the gathered size exceeds one slot's capacity.
  bool all_gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t> counts,
                  const std::function<void()>& check);

 private:
  struct alignas(64) Flag {
    std::atomic<uint64_t> seq;
  };
  float* slot(uint64_t seq, int rank) const;
  void publish_and_wait(uint64_t seq, const std::function<void()>& check);

  Flag* flags_;
  float* data_;
  int rank_, size_;
  int64_t capacity_;
  uint64_t seq_ = 0;
};

}  // namespace kestrel::dist
