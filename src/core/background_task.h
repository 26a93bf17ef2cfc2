// One persistent helper thread that runs a task while its owner does something else (the engine
// computes the next-token grammar masks while the forward pass runs). The thread starts with the
// first task, so an owner that never hands one over costs nothing.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace kestrel {

class BackgroundTask {
 public:
  BackgroundTask() = default;
  ~BackgroundTask();
  BackgroundTask(const BackgroundTask&) = delete;
  BackgroundTask& operator=(const BackgroundTask&) = delete;

  // Hands `task` to the helper thread; the previous task must have been waited for.
  void start(std::function<void()> task);
  // Returns once the task has run (at once when none is pending); rethrows what it threw.
  void wait();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<void()> task_;
  bool pending_ = false;  // a task is handed over and not finished
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace kestrel
