#include "core/thread_pool.h"

#include <algorithm>

#include "core/error.h"

namespace kestrel {

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads) {
  if (num_threads < 1) fail("thread count must be at least 1, got {}", num_threads);
  workers_.reserve(size_t(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run(const std::function<void(int, int)>& task) {
  if (num_threads_ == 1) {
    task(0, 1);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    pending_ = num_threads_ - 1;
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  task(0, num_threads_);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  task_ = nullptr;
}

void ThreadPool::worker_loop(int thread_index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly before sleeping: consecutive ops in a forward pass arrive microseconds apart.
    for (int spin = 0; spin < 20000; ++spin) {
      if (published_generation_.load(std::memory_order_acquire) != seen) break;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    const std::function<void(int, int)>* task = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stopping_) return;
      task = task_;
    }
    (*task)(thread_index, num_threads_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
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
  run([&](int thread_index, int thread_count) {
    const int64_t per_thread = (units + thread_count - 1) / thread_count;
    const int64_t begin = std::min(count, int64_t(thread_index) * per_thread * grain);
    const int64_t end = std::min(count, begin + per_thread * grain);
    if (begin < end) body(begin, end);
  });
}

}  // namespace kestrel
