// ThreadPool (core/thread_pool.h): every slot runs exactly once per region and never twice at
// once, parallel_for covers its range with grain-aligned pieces, and hand-offs survive the
// spinning and the sleeping paths, more threads than cores, a slow slot, and a competitor that
// keeps the pool's only core busy. Assertions are about what ran, never about how long it took.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace kestrel {
namespace {

// Runs `regions` regions back to back, each checking that it runs as the current region (a worker
// that woke late must not run a newer region's slot with an older task), that no slot runs twice
// at once, and, after run() returns, that every slot ran exactly once.
void expect_each_slot_once_per_region(ThreadPool& pool, int regions) {
  const int threads = pool.num_threads();
  std::vector<std::atomic<int>> calls(static_cast<size_t>(threads));
  std::vector<std::atomic<bool>> busy(static_cast<size_t>(threads));
  std::atomic<int> current{-1};
  std::atomic<int> errors{0};
  for (int region = 0; region < regions; ++region) {
    current.store(region);
    pool.run([&, region](int slot, int count) {
      if (count != threads || slot < 0 || slot >= threads || current.load() != region) {
        errors.fetch_add(1);
        return;
      }
      if (busy[size_t(slot)].exchange(true)) errors.fetch_add(1);
      // A little work, so that workers get to claim slots before the caller has run them all.
      [[maybe_unused]] volatile int sink = 0;
      for (int i = 0; i < 300; ++i) sink = i;
      calls[size_t(slot)].fetch_add(1);
      busy[size_t(slot)].store(false);
    });
    for (int i = 0; i < threads; ++i) {
      ASSERT_EQ(calls[size_t(i)].load(), region + 1) << threads << " threads, slot " << i << ", region " << region;
    }
  }
  EXPECT_EQ(errors.load(), 0) << threads << " threads";
}

TEST(ThreadPool, EverySlotRunsOncePerRegion) {
  for (int threads : {1, 2, 3, 4, 8}) {  // the machine may have 2 cores: 3, 4 and 8 outnumber them
    ThreadPool pool(threads);
    expect_each_slot_once_per_region(pool, 5000);
  }
}

TEST(ThreadPool, WakesSleepingWorkers) {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  for (int region = 0; region < 5; ++region) {
    // Long enough for the workers to stop spinning and sleep on the condition variable.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pool.run([&](int, int) { total.fetch_add(1); });
    EXPECT_EQ(total.load(), 3 * (region + 1));
  }
}

TEST(ThreadPool, WaitsForASlowSlot) {
  // Whichever thread runs slot 1 (a worker, or the caller if none claimed it) takes past the
  // caller's spin, so a caller waiting for a worker goes to sleep and must be woken.
  ThreadPool pool(2);
  for (int region = 0; region < 3; ++region) {
    std::atomic<bool> slow_done{false};
    std::atomic<int> fast{0};
    pool.run([&](int slot, int) {
      if (slot == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        slow_done.store(true);
      } else {
        fast.fetch_add(1);
      }
    });
    EXPECT_TRUE(slow_done.load());
    EXPECT_EQ(fast.load(), 1);
  }
}

// Slot 0 (always the caller's) waits until every other slot has run, so workers must claim them
// all, region after region: the workers' side of the hand-off, whatever the timing.
void expect_workers_run_the_other_slots(ThreadPool& pool, int regions) {
  const int threads = pool.num_threads();
  for (int region = 0; region < regions; ++region) {
    std::atomic<int> others{0};
    pool.run([&](int slot, int) {
      if (slot == 0) {
        while (others.load() < threads - 1) std::this_thread::yield();
      } else {
        others.fetch_add(1);
      }
    });
    ASSERT_EQ(others.load(), threads - 1);
  }
}

TEST(ThreadPool, WorkersRunTheSlotsTheCallerLeaves) {
  for (int threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    expect_workers_run_the_other_slots(pool, 300);
  }
}

TEST(ThreadPool, CallerRunsSlotsWhileAWorkerIsStuck) {
  // A worker that is away (here: stuck in slot 1 until the caller has run every other slot) does
  // not stop the other slots from running: the caller claims them.
  ThreadPool pool(4);
  std::atomic<int> others{0};
  pool.run([&](int slot, int) {
    if (slot == 1) {
      while (others.load() < 3) std::this_thread::yield();
    } else {
      others.fetch_add(1);
    }
  });
  EXPECT_EQ(others.load(), 3);
}

TEST(ThreadPool, ParallelForCoversTheRangeInGrainAlignedPieces) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t grain : {1, 16}) {
      for (int64_t count : {1, 15, 16, 17, 100, 1000}) {
        for (int repeat = 0; repeat < 20; ++repeat) {
          std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
          std::atomic<int> misaligned{0};
          pool.parallel_for(
              count,
              [&](int64_t begin, int64_t end) {
                if (begin % grain != 0 || begin >= end) misaligned.fetch_add(1);
                for (int64_t i = begin; i < end; ++i) hits[size_t(i)].fetch_add(1);
              },
              grain);
          EXPECT_EQ(misaligned.load(), 0);
          for (int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(hits[size_t(i)].load(), 1) << threads << " threads, grain " << grain << ", count " << count
                                                << ", i " << i;
          }
        }
      }
    }
  }
}

TEST(ThreadPool, SurvivesACompetitorOnItsOnlyCore) {
  // Every thread of the pool on one CPU, shared with a thread that spins without yielding: workers
  // get that CPU only now and then, as when another process keeps the cores busy.
  cpu_set_t original;
  CPU_ZERO(&original);
  ASSERT_EQ(sched_getaffinity(0, sizeof(original), &original), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &original)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // threads created from here inherit it
  std::atomic<bool> stop{false};
  std::thread competitor([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  for (int threads : {2, 4}) {
    ThreadPool pool(threads);
    expect_each_slot_once_per_region(pool, 300);
    expect_workers_run_the_other_slots(pool, 20);
  }
  stop.store(true);
  competitor.join();
  ASSERT_EQ(sched_setaffinity(0, sizeof(original), &original), 0);
}

TEST(ThreadPool, RejectsZeroThreads) { EXPECT_THROW(ThreadPool(0), Error); }

}  // namespace
}  // namespace kestrel
