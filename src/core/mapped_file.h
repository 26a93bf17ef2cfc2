// A read-only memory-mapped file. Model weights are used in place from the mapping (no copy),
// so a 4 GB model costs page cache, not heap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kestrel {

class MappedFile {
 public:
  // Throws kestrel::Error naming the path if the file cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops this process's copies of the pages wholly inside [begin, begin + bytes) (bytes it no
  // longer reads: re-encoded weights); touched again, they are read back from the file. A range
  // not inside the mapping is left alone.
  void release(const void* begin, size_t bytes) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kestrel
