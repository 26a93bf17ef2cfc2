// A persistent pool of worker threads: threads are created once and woken per parallel region,
// because decode runs hundreds of small ops per token and thread creation would dominate.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kestrel {

class ThreadPool {
 public:
  // num_threads counts the calling thread, which always takes part in the work.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs task(thread_index, num_threads) on every thread and waits for all of them.
  void run(const std::function<void(int, int)>& task);

  // Splits [0, count) into contiguous ranges, one per thread; body(begin, end). Ranges are aligned
  // to `grain` items so kernels can keep blocks whole.
  void parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& body,
                    int64_t grain = 1);

 private:
  void worker_loop(int thread_index);

  int num_threads_;
  std::vector<std::thread> workers_;
  // Hand-off without a lock on the fast path: run() publishes task_ and bumps generation_;
  // workers spin on generation_ for a while before sleeping on wake_, and the caller spins on
  // pending_ before sleeping on done_. sleepers_ / caller_sleeping_ tell the other side when a
  // notify is needed (each side stores its flag, then re-checks the other's counter, both
  // sequentially consistent, so one of the two always sees the other).
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int, int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stopping_{false};
};

}  // namespace kestrel
