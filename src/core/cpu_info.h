// How many CPUs this process may actually use, for default thread counts. hardware_concurrency
// counts the machine's CPUs, but a process pinned to fewer (taskset, cpuset) or capped by a
// cgroup CPU quota (containers: docker --cpus, Kubernetes limits) that runs more compute threads
// than it has CPUs gets its threads descheduled while others wait for them.
#pragma once

#include <cstdint>
#include <string_view>

namespace kestrel {

// The CPUs in this thread's affinity mask, capped by the cgroup CPU quota (rounded up) of this
// process's cgroup and its ancestors, v2 (cpu.max) or v1 (cpu.cfs_quota_us / cpu.cfs_period_us);
// at least 1.
int available_cpus();

// The CPUs in this thread's affinity mask (hardware_concurrency where that cannot be read).
int affinity_cpus();

// The tightest cgroup CPU quota over this process's cgroup and its ancestors, in whole CPUs
// rounded up; 0 when there is none (or none can be read).
int cgroup_cpu_limit();

// Whole CPUs (rounded up) of a quota of `quota` microseconds per `period`; 0 when unlimited
// (quota <= 0, as v1's -1) or the period is not positive.
int quota_cpus(int64_t quota, int64_t period);

// The same from cgroup v2's cpu.max text, "QUOTA PERIOD" or "max PERIOD"; 0 when unlimited or
// not in that form.
int cpu_max_cpus(std::string_view cpu_max);

}  // namespace kestrel
