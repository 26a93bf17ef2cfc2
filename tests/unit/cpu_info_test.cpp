// available_cpus (core/cpu_info.h): the affinity mask's count, capped by a cgroup CPU quota; the
// quota parsers on the texts cgroup v1 and v2 write.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>

#include "core/cpu_info.h"

namespace kestrel {
namespace {

int affinity_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

TEST(CpuInfo, AvailableCpusIsTheAffinityCountCappedByTheQuota) {
  EXPECT_EQ(affinity_cpus(), affinity_count());
  const int limit = cgroup_cpu_limit();
  EXPECT_GE(limit, 0);
  EXPECT_EQ(available_cpus(), limit == 0 ? affinity_count() : std::max(1, std::min(affinity_count(), limit)));
}

TEST(CpuInfo, FollowsANarrowerAffinityMask) {
  cpu_set_t original;
  CPU_ZERO(&original);
  ASSERT_EQ(sched_getaffinity(0, sizeof(original), &original), 0);
  int first = 0;
  while (!CPU_ISSET(first, &original)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // this thread only
  const int narrowed = available_cpus();
  ASSERT_EQ(sched_setaffinity(0, sizeof(original), &original), 0);
  EXPECT_EQ(narrowed, 1);
}

TEST(CpuInfo, ParsesCgroupV2CpuMax) {
  EXPECT_EQ(cpu_max_cpus("max 100000\n"), 0);
  EXPECT_EQ(cpu_max_cpus("max"), 0);
  EXPECT_EQ(cpu_max_cpus("150000 100000\n"), 2);
  EXPECT_EQ(cpu_max_cpus("50000 100000"), 1);
  EXPECT_EQ(cpu_max_cpus("200000 100000"), 2);
  EXPECT_EQ(cpu_max_cpus("400000 50000\n"), 8);
  EXPECT_EQ(cpu_max_cpus("1000 100000"), 1);
  EXPECT_EQ(cpu_max_cpus(""), 0);
  EXPECT_EQ(cpu_max_cpus("150000"), 0);
  EXPECT_EQ(cpu_max_cpus("150000 0"), 0);
}

TEST(CpuInfo, ConvertsCgroupV1Quotas) {
  EXPECT_EQ(quota_cpus(-1, 100000), 0);
  EXPECT_EQ(quota_cpus(0, 100000), 0);
  EXPECT_EQ(quota_cpus(100000, 0), 0);
  EXPECT_EQ(quota_cpus(250000, 100000), 3);
  EXPECT_EQ(quota_cpus(100000, 100000), 1);
}

}  // namespace
}  // namespace kestrel
