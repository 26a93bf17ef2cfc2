#include "core/background_task.h"

#include <utility>

#include "core/error.h"

namespace kestrel {

BackgroundTask::~BackgroundTask() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void BackgroundTask::start(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_) fail("internal: a background task was started before the previous one was waited for");
    task_ = std::move(task);
    pending_ = true;
    error_ = nullptr;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  wake_.notify_one();
}

void BackgroundTask::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return !pending_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void BackgroundTask::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || (pending_ && task_); });
    if (stop_) return;
    std::function<void()> task = std::move(task_);
    task_ = nullptr;
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    pending_ = false;
    done_.notify_all();
  }
}

}  // namespace kestrel
