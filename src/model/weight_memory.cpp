#include "model/weight_memory.h"

#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/memory_info.h"

namespace kestrel {

namespace {

// The bytes of the regular files in `folder` whose names end in `suffix`.
int64_t folder_bytes(const std::string& folder, const std::string& suffix, std::error_code& error) {
  int64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(error) || name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const auto size = entry.file_size(error);
    if (error) return 0;
    bytes += int64_t(size);
  }
  return bytes;
}

}  // namespace

FileResidency choose_residency(WeightMemory wanted, int64_t file_bytes, int64_t available_bytes, bool whole_file) {
  if (wanted == WeightMemory::Mapped) return FileResidency::Mapped;
  if (wanted == WeightMemory::InMemory) return FileResidency::Copied;
  // Half: the KV cache is sized from what is left, and the page cache the read fills is reclaimable.
  return whole_file && file_bytes <= available_bytes / 2 ? FileResidency::Copied : FileResidency::Mapped;
}

FileResidency weights_residency(const std::string& path, bool folder, bool whole_file, WeightMemory wanted) {
  std::error_code error;
  const int64_t bytes =
      folder ? folder_bytes(path, ".safetensors", error) : int64_t(std::filesystem::file_size(path, error));
  if (error) return FileResidency::Mapped;
  const int64_t available = available_memory_bytes();
  const FileResidency residency = choose_residency(wanted, bytes, available, whole_file);
  if (residency == FileResidency::Copied && available > 0 && bytes > available) {
    fail("{}: --no-mmap needs {} of memory to read the weights into, {} is available; leave it out (or give "
         "--mmap) to map the file instead",
         path, human_bytes(double(bytes)), human_bytes(double(available)));
  }
  return residency;
}

}  // namespace kestrel
