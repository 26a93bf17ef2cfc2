// How a rank waits for its peers: spin briefly (a collective inside a decode step answers in
// microseconds), then yield the core (ranks may outnumber cores: tests oversubscribe), then sleep
// (a worker idling between requests must not burn a core). Every so often the caller's check runs:
// the deadline and the peers' liveness, which throw GroupFailure.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace kestrel::dist {

class WaitPolicy {
 public:
  // One pause; returns true when the caller should run its checks now.
  bool pause() {
    ++iterations_;
    if (iterations_ < kSpins) {
#if defined(__x86_64__) || defined(_M_X64)
      _mm_pause();
#endif
    } else if (iterations_ < kSpins + kYields) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(iterations_ < kSpins + kYields + 2000 ? 50 : 500));
    }
    return (iterations_ & 255) == 0 || iterations_ >= kSpins + kYields;
  }

 private:
  static constexpr uint64_t kSpins = 4000;
  static constexpr uint64_t kYields = 20000;
  uint64_t iterations_ = 0;
};

}  // namespace kestrel::dist
