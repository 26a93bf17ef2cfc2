// Where a model's weights live (core/mapped_file.h): mapped from the file (a folder's safetensors
// files), or read into anonymous memory (transparent huge pages where the kernel gives them: faster
// decode, docs/PERFORMANCE.md "Weights in memory instead of mapped"), and the default between them.
#pragma once

#include <cstdint>
#include <string>

#include "core/mapped_file.h"

namespace kestrel {

// Auto: in memory when the files take at most half the available memory and the whole model is
// wanted (no shard request, prefaulted), else mapped. --mmap / --no-mmap force Mapped / InMemory.
enum class WeightMemory { Auto, Mapped, InMemory };

// The choice for files of `file_bytes` with `available_bytes` of memory available (0: unknown).
FileResidency choose_residency(WeightMemory wanted, int64_t file_bytes, int64_t available_bytes, bool whole_file);

// choose_residency for the file at `path` (`folder`: its *.safetensors files) and this machine's
// available memory. Reading more than the available memory is refused with a clear error; a file
// that cannot be sized is mapped (its open then names what is wrong).
FileResidency weights_residency(const std::string& path, bool folder, bool whole_file, WeightMemory wanted);

}  // namespace kestrel
