// ThreadPool (core/thread_pool.h): every thread runs every region exactly once, parallel_for covers
// its range with grain-aligned pieces, and hand-offs survive both the spinning and the sleeping
// paths (regions back to back, and regions after the workers have gone to sleep).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace kestrel {
namespace {

TEST(ThreadPool, EveryThreadRunsEachRegionOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> calls(static_cast<size_t>(threads));
    constexpr int kRegions = 20000;  // back to back: the spinning hand-off
    for (int region = 0; region < kRegions; ++region) {
      pool.run([&](int index, int count) {
        ASSERT_EQ(count, threads);
        calls[size_t(index)].fetch_add(1);
      });
    }
    for (int i = 0; i < threads; ++i) EXPECT_EQ(calls[size_t(i)].load(), kRegions) << "thread " << i;
  }
}

TEST(ThreadPool, WakesSleepingWorkers) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  for (int region = 0; region < 5; ++region) {
    // Long enough for the worker to stop spinning and sleep on the condition variable.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    pool.run([&](int, int) { total.fetch_add(1); });
    EXPECT_EQ(total.load(), 2 * (region + 1));
  }
}

TEST(ThreadPool, CallerSleepsUntilASlowWorkerFinishes) {
  ThreadPool pool(2);
  std::atomic<bool> worker_done{false};
  pool.run([&](int index, int) {
    if (index == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the caller's spin
      worker_done.store(true);
    }
  });
  EXPECT_TRUE(worker_done.load());
}

TEST(ThreadPool, ParallelForCoversTheRangeInGrainAlignedPieces) {
  ThreadPool pool(2);
  for (int64_t count : {1, 15, 16, 17, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
    pool.parallel_for(
        count,
        [&](int64_t begin, int64_t end) {
          EXPECT_EQ(begin % 16, 0);
          for (int64_t i = begin; i < end; ++i) hits[size_t(i)].fetch_add(1);
        },
        16);
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "count " << count << " i " << i;
  }
}

TEST(ThreadPool, RejectsZeroThreads) { EXPECT_THROW(ThreadPool(0), Error); }

}  // namespace
}  // namespace kestrel
