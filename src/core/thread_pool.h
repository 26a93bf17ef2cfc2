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

  // Runs task(slot, num_threads) once for every slot in [0, num_threads) and waits for all of them.
  // The caller runs slot 0; the other slots go to whichever thread claims them first, the caller
  // included, so a worker the OS has not scheduled does not hold up the region (when other
  // processes keep the cores busy it would cost a time slice, milliseconds, per op). A slot never
  // runs twice at once, so tasks may index per-thread scratch by slot; one thread may run several
  // slots one after another.
  void run(const std::function<void(int, int)>& task);

  // Splits [0, count) into contiguous ranges, one per slot; body(begin, end). Ranges are aligned
  // to `grain` items so kernels can keep blocks whole.
  void parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& body,
                    int64_t grain = 1);

 private:
  void worker_loop();
  // Waits (spin, then sleep) until the generation differs from `seen`; returns the new one.
  uint64_t wait_for_generation(uint64_t seen, int spin_iterations);
  // Claims the next unrun slot of `generation`, or returns -1 when none is left (or the
  // generation has moved on).
  int claim_slot(uint64_t generation);
  // Runs every slot of `generation` that this thread can claim; returns how many it ran.
  int run_claimed_slots(uint64_t generation);

  int num_threads_;
  std::vector<std::thread> workers_;
  // Hand-off without a lock on the fast path. state_ packs the generation (high bits, bumped by
  // each run()) with the next unclaimed slot (low bits), so a claim is one compare-exchange that
  // fails once the generation has moved on: a worker that woke late cannot claim a newer region's
  // slot for the region it saw. run() publishes task_ and pending_ (slots 1.. not yet finished)
  // before the state_ store that starts the generation; a thread reads task_ only after a claim,
  // and run() cannot return and replace it while a claimed slot is unfinished. Workers spin on
  // state_ for a while before sleeping on wake_, and the caller spins on pending_ before sleeping
  // on done_. sleepers_ / caller_sleeping_ tell the other side when a notify is needed (each side
  // stores its flag, then re-checks the other's counter, both sequentially consistent, so one of
  // the two always sees the other).
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int, int)>* task_ = nullptr;
  uint64_t generation_ = 0;  // the caller's (and the destructor's) copy of state_'s generation
  std::atomic<uint64_t> state_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stopping_{false};
};

}  // namespace kestrel
