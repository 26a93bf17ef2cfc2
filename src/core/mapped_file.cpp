#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace kestrel {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail("{}: cannot mmap {} bytes: {}", path, size_, std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(mapping);
  }
  ::close(fd);
}

void MappedFile::release(const void* begin, size_t bytes) const {
  const auto first = reinterpret_cast<uintptr_t>(begin), mapped = reinterpret_cast<uintptr_t>(data_);
  if (data_ == nullptr || first < mapped || first + bytes > mapped + size_) return;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t from = (first + page - 1) / page * page, to = (first + bytes) / page * page;
  // A read-only private mapping never written: the pages come back from the file if read again.
  if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kestrel
