#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/error.h"
#include "core/progress.h"

namespace kestrel {

namespace {

size_t page_size() { return size_t(::sysconf(_SC_PAGESIZE)); }

// Reads the whole file into `out` (size bytes), in pieces so the progress bar moves.
void read_all(int fd, uint8_t* out, size_t size, const std::string& path) {
  constexpr size_t kPiece = size_t(64) << 20;
  ProgressBar progress("loading", int64_t(size >> 20) + 1);
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, out + done, std::min(kPiece, size - done), off_t(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("{}: cannot read at byte {}: {}", path, done, std::strerror(errno));
    if (got == 0) fail("{}: ended at byte {} of {} while being read (changed on disk?)", path, done, size);
    done += size_t(got);
    progress.update(int64_t(done >> 20));
  }
  progress.finish();
}

}  // namespace

MappedFile::MappedFile(const std::string& path, FileResidency residency) : path_(path), residency_(residency) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  auto close_and_fail = [&](const std::string& what) {
    const int err = errno;
    ::close(fd);
    fail("{}: {}: {}", path, what, std::strerror(err));
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) close_and_fail("cannot stat");
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  size_ = size_t(st.st_size);
  if (size_ == 0) {
    ::close(fd);
    return;
  }
  if (residency_ == FileResidency::Mapped) {
    void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) close_and_fail(fmt::format("cannot mmap {} bytes", size_));
    data_ = static_cast<const uint8_t*>(mapping);
    ::close(fd);
    return;
  }
  try {
    copy_ = LargeBuffer(size_);  // anonymous, advised huge pages
  } catch (const std::bad_alloc&) {
    close_and_fail(fmt::format("cannot allocate {} bytes to read it into (try --mmap)", size_));
  }
  try {
    read_all(fd, copy_.data(), size_, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::mprotect(copy_.data(), size_, PROT_READ);  // weights are never written: a stray write faults
  data_ = copy_.data();
  fd_ = fd;
}

void MappedFile::release(const void* begin, size_t bytes) const {
  const auto first = reinterpret_cast<uintptr_t>(begin), mapped = reinterpret_cast<uintptr_t>(data_);
  if (data_ == nullptr || first < mapped || first + bytes > mapped + size_) return;
  const uintptr_t page = page_size();
  const uintptr_t from = (first + page - 1) / page * page, to = (first + bytes) / page * page;
  if (to <= from) return;
  if (residency_ == FileResidency::Mapped) {
    // A read-only private mapping never written: the pages come back from the file if read again.
    ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
    return;
  }
  // The copy's pages are returned by mapping the same bytes of the file over them (data_ is page
  // aligned, so the offset is too). A failed MAP_FIXED may have unmapped the range already, so it
  // is an error, not a fallback.
  if (::mmap(reinterpret_cast<void*>(from), to - from, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd_,
             off_t(from - mapped)) == MAP_FAILED) {
    fail("{}: cannot map bytes {}-{} back from the file in place of their copy: {}", path_, from - mapped,
         to - mapped, std::strerror(errno));
  }
}

MappedFile::~MappedFile() {
  // A copy is unmapped by copy_ (with any file pages mapped over parts of it).
  if (data_ != nullptr && residency_ == FileResidency::Mapped) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace kestrel
