// A large zero-initialised buffer from its own anonymous mapping, with transparent huge pages
// asked for (madvise): the KV cache. Attention streams it in runs of a few KiB from blocks spread
// anywhere in it; with 4 KiB pages nearly every run is a TLB miss, with 2 MiB pages almost none.
// Pages are faulted in on first write, so an unused part of a large cache costs no memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kestrel {

class LargeBuffer {
 public:
  LargeBuffer() = default;
  // Throws std::bad_alloc if the mapping fails.
  explicit LargeBuffer(size_t bytes);
  ~LargeBuffer();
  LargeBuffer(LargeBuffer&& other) noexcept;
  LargeBuffer& operator=(LargeBuffer&& other) noexcept;
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kestrel
