#include "core/cpu_info.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace kestrel {

namespace {

// The first integer in `text` after leading spaces; false if there is none.
bool parse_int(std::string_view& text, int64_t& value) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc()) return false;
  text.remove_prefix(size_t(end - text.data()));
  return true;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string();
}

// The tightest quota that `read_quota(dir)` finds from `mount`/`relative` up to `mount` (a
// cgroup's effective limit is the smallest on its path). /proc/self/cgroup names the path from
// the hierarchy's root, which inside a container without a cgroup namespace is not where the
// container's cgroup is mounted; walking up from a directory that does not exist reaches the
// mount point, which is then the container's own cgroup. A path outside this namespace's root
// ("/../..") reads the mount point alone.
template <typename ReadQuota>
int tightest_quota(const std::filesystem::path& mount, std::string_view relative, ReadQuota read_quota) {
  std::filesystem::path dir = std::filesystem::path(relative).lexically_normal().relative_path();
  if (!dir.empty() && *dir.begin() == "..") dir.clear();
  int limit = 0;
  for (;;) {
    const int cpus = read_quota(mount / dir);
    if (cpus > 0) limit = limit == 0 ? cpus : std::min(limit, cpus);
    if (dir.empty()) return limit;
    dir = dir.parent_path();
  }
}

int v1_quota(const std::filesystem::path& dir) {
  std::string quota = read_text(dir / "cpu.cfs_quota_us"), period = read_text(dir / "cpu.cfs_period_us");
  std::string_view q = quota, p = period;
  int64_t quota_us = 0, period_us = 0;
  if (!parse_int(q, quota_us) || !parse_int(p, period_us)) return 0;
  return quota_cpus(quota_us, period_us);
}

}  // namespace

int quota_cpus(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return 0;
  return int(std::min<int64_t>((quota + period - 1) / period, 1 << 20));
}

int cpu_max_cpus(std::string_view cpu_max) {
  int64_t quota = 0, period = 0;
  if (!parse_int(cpu_max, quota) || !parse_int(cpu_max, period)) return 0;  // "max ..." too
  return quota_cpus(quota, period);
}

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  // More CPUs than a cpu_set_t holds (1024), or no such call: the machine's count.
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

int cgroup_cpu_limit() {
  namespace fs = std::filesystem;
  const fs::path root = "/sys/fs/cgroup";
  int limit = 0;
  auto tighten = [&](int cpus) {
    if (cpus > 0) limit = limit == 0 ? cpus : std::min(limit, cpus);
  };
  // Lines of /proc/self/cgroup: "0::/path" (v2), "4:cpu,cpuacct:/path" (v1).
  std::istringstream lines(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string_view controllers = std::string_view(line).substr(first + 1, second - first - 1);
    const std::string_view path = std::string_view(line).substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      tighten(tightest_quota(root, path, [](const fs::path& dir) { return cpu_max_cpus(read_text(dir / "cpu.max")); }));
      continue;
    }
    for (size_t begin = 0; begin <= controllers.size();) {
      const size_t end = std::min(controllers.find(',', begin), controllers.size());
      if (controllers.substr(begin, end - begin) == "cpu") {
        // Mounted as cpu, or as cpu,cpuacct (with cpu a link to it).
        for (const char* mount : {"cpu", "cpu,cpuacct", "cpuacct,cpu"}) {
          std::error_code error;
          if (fs::exists(root / mount, error)) {
            tighten(tightest_quota(root / mount, path, v1_quota));
            break;
          }
        }
      }
      begin = end + 1;
    }
  }
  return limit;
}

int available_cpus() {
  const int cpus = affinity_cpus(), limit = cgroup_cpu_limit();
  return std::max(1, limit > 0 ? std::min(cpus, limit) : cpus);
}

}  // namespace kestrel
