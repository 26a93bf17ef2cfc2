#include "dist/shm_group.h"

#include <algorithm>
#include <cstring>

#include "dist/wait_policy.h"

namespace kestrel::dist {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "flags are shared between processes");

namespace {

// The flags on their own cache lines. Every rank maps the segment at a page boundary plus the same
// offset, so every rank rounds up to the same place in it.
void* cache_line_aligned(void* base) {
  const auto address = reinterpret_cast<uintptr_t>(base);
  return reinterpret_cast<void*>((address + 63) & ~uintptr_t(63));
}

}  // namespace

int64_t ShmGroup::segment_bytes(int size, int64_t capacity_floats) {
  return 64 + int64_t(sizeof(Flag)) * size + 2 * int64_t(size) * capacity_floats * int64_t(sizeof(float));
}

ShmGroup::ShmGroup(void* base, int rank, int size, int64_t capacity_floats)
    : flags_(static_cast<Flag*>(cache_line_aligned(base))),
      data_(reinterpret_cast<float*>(static_cast<Flag*>(cache_line_aligned(base)) + size)),
      rank_(rank),
      size_(size),
      capacity_(capacity_floats) {}

float* ShmGroup::slot(uint64_t seq, int rank) const {
  return data_ + (int64_t(seq & 1) * size_ + rank) * capacity_;
}

void ShmGroup::publish_and_wait(uint64_t seq, const std::function<void()>& check) {
  flags_[rank_].seq.store(seq, std::memory_order_release);
  for (int r = 0; r < size_; ++r) {
    WaitPolicy wait;
    while (flags_[r].seq.load(std::memory_order_acquire) < seq) {
      if (wait.pause()) check();
    }
  }
}

void ShmGroup::all_reduce_sum(std::span<float> data, const std::function<void()>& check) {
  for (size_t offset = 0; offset < data.size(); offset += size_t(capacity_)) {
    const size_t n = std::min(data.size() - offset, size_t(capacity_));
    float* const chunk = data.data() + offset;
    const uint64_t seq = ++seq_;
    std::memcpy(slot(seq, rank_), chunk, n * sizeof(float));
    publish_and_wait(seq, check);
    // Every rank adds the same slots in rank order: bitwise the same sums everywhere.
    const float* first = slot(seq, 0);
    std::copy_n(first, n, chunk);
    for (int r = 1; r < size_; ++r) {
      const float* part = slot(seq, r);
      for (size_t i = 0; i < n; ++i) chunk[i] += part[i];
    }
  }
}

bool ShmGroup::all_gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t> counts,
                          const std::function<void()>& check) {
  for (int64_t c : counts) {
    if (c > capacity_) return false;
  }
  const uint64_t seq = ++seq_;
  std::memcpy(slot(seq, rank_), mine.data(), mine.size() * sizeof(float));
  publish_and_wait(seq, check);
  int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    std::memcpy(all.data() + offset, slot(seq, r), size_t(counts[size_t(r)]) * sizeof(float));
    offset += counts[size_t(r)];
  }
  return true;
}

}  // namespace kestrel::dist
