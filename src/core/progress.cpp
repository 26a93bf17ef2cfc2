#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace kestrel {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      enabled_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - std::chrono::seconds(1)) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(int64_t done) {
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double fraction = std::clamp(double(done) / double(total_), 0.0, 1.0);
  constexpr int kWidth = 30;
  const int filled = int(fraction * kWidth);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = fraction > 0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %lld/%lld  %.1fs elapsed, %.1fs left ", label_.c_str(),
               filled, "==============================", kWidth - filled, "", int(fraction * 100),
               (long long)done, (long long)total_, elapsed, eta);
  std::fflush(stderr);
}

void ProgressBar::clear() {
  if (!enabled_ || finished_) return;
  std::fputs("\r\033[K", stderr);
  last_draw_ = start_ - std::chrono::seconds(1);
}

void ProgressBar::finish() {
  if (!enabled_ || finished_) return;
  update(total_);
  finished_ = true;
  std::fputc('\n', stderr);
}

}  // namespace kestrel
