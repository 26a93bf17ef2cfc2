// What memory this machine has free, for sizing the KV cache from the machine (vLLM's
// gpu_memory_utilization, on host memory).
#pragma once

#include <cstdint>
#include <string>

namespace kestrel {

// The kernel's estimate of memory available to a new workload without swapping (MemAvailable in
// /proc/meminfo: free memory plus reclaimable caches), or, where that is unknown, free physical
// pages; 0 if neither can be read.
int64_t available_memory_bytes();

// "18.00 KiB", "1.50 GiB": a byte count in binary units with two decimals.
std::string human_bytes(double bytes);

}  // namespace kestrel
