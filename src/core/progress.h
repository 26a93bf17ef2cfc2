// A one-line progress bar for long work (load, perplexity, convert). It draws only when stderr is a
// terminal, so logs and tests stay clean.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kestrel {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();
  void update(int64_t done);
  // Erases the bar's line (a terminal only), so a message can be printed; the next update redraws it.
  void clear();
  void finish();

 private:
  std::string label_;
  int64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace kestrel
