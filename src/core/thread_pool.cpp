#include "core/thread_pool.h"

#include <algorithm>

#include "core/error.h"

namespace kestrel {

namespace {

// state_'s low bits hold the next unclaimed slot, the rest the generation.
constexpr int kSlotBits = 16;
constexpr uint64_t kSlotMask = (uint64_t(1) << kSlotBits) - 1;

// Consecutive ops of a forward pass arrive microseconds apart: spinning a while (about a
// millisecond) before sleeping saves a futex wake-up per op. Every 16th iteration yields the core,
// so a spinning thread does not starve the thread it waits for when threads outnumber cores (the
// server's HTTP threads, other processes). Measured on 2 cores, empty regions back to back: 2
// threads 1-2 us per region (condition variables only: 4-6 us); 3 threads 6-8 us (26 us; pure
// spinning without yields: 740 us). Since slots are claimable, the spin no longer decides whether
// a descheduled worker stalls a region (the caller runs the slot instead), and a tenth of it
// (2000) decoded no faster with both cores busy (docs/PERFORMANCE.md), so it stays.
constexpr int kSpinIterations = 20000;

inline void cpu_relax(int spin) {
  if (spin % 16 == 15) {
    std::this_thread::yield();
    return;
  }
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads) {
  if (num_threads < 1) fail("thread count must be at least 1, got {}", num_threads);
  if (uint64_t(num_threads) >= kSlotMask) fail("thread count must be below {}, got {}", kSlotMask, num_threads);
  workers_.reserve(size_t(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true);
    // A generation with no slot left to claim: workers wake, see stopping_ and leave.
    state_.store((++generation_ << kSlotBits) | uint64_t(num_threads_));
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

int ThreadPool::claim_slot(uint64_t generation) {
  uint64_t state = state_.load(std::memory_order_acquire);
  while ((state >> kSlotBits) == generation && int(state & kSlotMask) < num_threads_) {
    // Acquire on success: task_ and pending_ were written before this generation's state_ store.
    if (state_.compare_exchange_weak(state, state + 1, std::memory_order_acquire)) {
      return int(state & kSlotMask);
    }
  }
  return -1;
}

int ThreadPool::run_claimed_slots(uint64_t generation) {
  int ran = 0;
  // task_ stays this generation's while we hold an unfinished slot: run() cannot return, let alone
  // publish the next task, before pending_ reaches 0.
  for (int slot; (slot = claim_slot(generation)) >= 0; ++ran) {
    (*task_)(slot, num_threads_);
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
  return ran;
}

void ThreadPool::run(const std::function<void(int, int)>& task) {
  if (num_threads_ == 1) {
    task(0, 1);
    return;
  }
  task_ = &task;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  // Slot 0 is the caller's, so the next claimable slot is 1. Sequentially consistent: pairs with
  // the sleepers_ check below (see the header).
  state_.store((++generation_ << kSlotBits) | 1);
  if (sleepers_.load() > 0) {
    // Taking the mutex orders this notify after a sleeper's predicate check.
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  task(0, num_threads_);
  // Slots no worker has taken yet (descheduled, or still waking up) run here rather than wait for
  // one; what is left to wait for is slots that workers are running now.
  run_claimed_slots(generation_);
  for (int spin = 0; spin < kSpinIterations; ++spin) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    cpu_relax(spin);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  caller_sleeping_.store(true);
  done_.wait(lock, [this] { return pending_.load() == 0; });
  caller_sleeping_.store(false);
}

uint64_t ThreadPool::wait_for_generation(uint64_t seen, int spin_iterations) {
  uint64_t current = state_.load(std::memory_order_acquire) >> kSlotBits;
  for (int spin = 0; spin < spin_iterations && current == seen; ++spin) {
    cpu_relax(spin);
    current = state_.load(std::memory_order_acquire) >> kSlotBits;
  }
  if (current != seen) return current;
  std::unique_lock<std::mutex> lock(mutex_);
  sleepers_.fetch_add(1);
  wake_.wait(lock, [&] { return (state_.load() >> kSlotBits) != seen; });
  sleepers_.fetch_sub(1);
  return state_.load() >> kSlotBits;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    seen = wait_for_generation(seen, kSpinIterations);
    if (stopping_.load()) return;
    run_claimed_slots(seen);
  }
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& body,
                              int64_t grain) {
  if (count <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t units = (count + grain - 1) / grain;
  if (num_threads_ == 1 || units == 1) {
    body(0, count);
    return;
  }
  run([&](int slot, int slots) {
    const int64_t per_slot = (units + slots - 1) / slots;
    const int64_t begin = std::min(count, int64_t(slot) * per_slot * grain);
    const int64_t end = std::min(count, begin + per_slot * grain);
    if (begin < end) body(begin, end);
  });
}

}  // namespace kestrel
