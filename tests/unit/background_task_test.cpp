// BackgroundTask: the task runs on another thread while the caller goes on (the caller releases
// it after start() returned, so a task run inside start() would deadlock the test, which the
// timeout turns into a failure), wait() returns after it and rethrows what it threw, and the
// helper is reused across tasks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "core/background_task.h"

namespace kestrel {
namespace {

TEST(BackgroundTask, RunsWhileTheCallerGoesOn) {
  BackgroundTask task;
  task.wait();  // nothing pending: returns at once
  for (int round = 0; round < 3; ++round) {
    std::atomic<bool> released{false}, ran{false};
    std::thread::id helper;
    task.start([&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!released.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      helper = std::this_thread::get_id();
      ran = released.load();
    });
    released = true;  // only the caller, after start() returned, lets the task finish
    task.wait();
    EXPECT_TRUE(ran.load()) << "round " << round;
    EXPECT_NE(helper, std::this_thread::get_id());
  }
}

TEST(BackgroundTask, WaitRethrowsTheTasksError) {
  BackgroundTask task;
  task.start([] { throw std::runtime_error("mask failed"); });
  EXPECT_THROW(task.wait(), std::runtime_error);
  task.wait();  // the error is reported once
  int value = 0;
  task.start([&] { value = 7; });
  task.wait();
  EXPECT_EQ(value, 7);
}

}  // namespace
}  // namespace kestrel
