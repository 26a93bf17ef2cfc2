// A read-only file in memory. Mapped (the default): model weights are used in place from the
// mapping (no copy), so a 4 GB model costs page cache, not heap, and processes on one host share
// it. Copied: the file is read into anonymous memory backed by transparent huge pages where the
// kernel allows, which MoE decode reads faster than the page cache's mapping (docs/PERFORMANCE.md,
// "Weights in memory instead of mapped"); llama.cpp's --no-mmap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/large_buffer.h"

namespace kestrel {

enum class FileResidency { Mapped, Copied };

class MappedFile {
 public:
  // Throws kestrel::Error naming the path if the file cannot be opened, mapped, or (Copied) read or
  // given memory to be read into.
  explicit MappedFile(const std::string& path, FileResidency residency = FileResidency::Mapped);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  FileResidency residency() const { return residency_; }
  // Drops this process's copies of the pages wholly inside [begin, begin + bytes) (bytes it no
  // longer reads: re-encoded weights); touched again, they are read back from the file (Copied:
  // the range is mapped from the file in place of the copy). A range not inside the data is left
  // alone.
  void release(const void* begin, size_t bytes) const;

 private:
  std::string path_;
  FileResidency residency_ = FileResidency::Mapped;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  LargeBuffer copy_;     // Copied: the file's bytes
  int fd_ = -1;          // kept open while Copied, for release
};

}  // namespace kestrel
