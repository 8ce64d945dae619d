// The kernel caches' bookkeeping without a GPU: what a cache is shared over (the topology key),
// which problems take one, one cache per topology made once, and the option's environment
// variable.
#include "cudnn/kernel_cache.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "convplan/cudnn_backend.h"
#include "cudnn/descriptor.h"

namespace convplan::cudnn_detail {
namespace {

ConvProblem depthwise(int64_t channels, int64_t size, int64_t stride) {
  ConvProblem p = ConvProblem::with_data_type(ConvProblem{}, DataType::kBFloat16);
  p.layout = Layout::kChannelsLast;
  p.n = 8;
  p.c = p.k = p.groups = channels;
  p.input = {size, size, 1};
  p.filter = {3, 3, 1};
  p.pad_before = p.pad_after = {1, 1, 0};
  p.stride = {stride, stride, 1};
  return p;
}

TEST(KernelCacheTopology, IsSharedByShapesAndSplitByWhatShapesTheOperations) {
  const ConvProblem base = depthwise(96, 56, 1);
  EXPECT_EQ(kernel_cache_topology(base), "fwd/bf16/f32/nhwc/tc1/depthwise/beta0/");
  // Sizes, strides and batch do not split a topology.
  ConvProblem other = depthwise(576, 14, 2);
  other.n = 256;
  EXPECT_EQ(kernel_cache_topology(other), kernel_cache_topology(base));

  std::set<std::string> keys{kernel_cache_topology(base)};
  ConvProblem p = base;
  p.direction = Direction::kBackwardFilter;
  keys.insert(kernel_cache_topology(p));
  p = ConvProblem::with_data_type(base, DataType::kHalf);
  keys.insert(kernel_cache_topology(p));
  p = base;
  p.layout = Layout::kChannelsFirst;
  keys.insert(kernel_cache_topology(p));
  p = base;
  p.groups = 1;
  keys.insert(kernel_cache_topology(p));
  p = base;
  p.groups = 32;
  keys.insert(kernel_cache_topology(p));
  p = base;
  p.beta = 1;
  keys.insert(kernel_cache_topology(p));
  p = base;
  p.post_ops.push(PostOpKind::kBias);
  p.post_ops.push(PostOpKind::kRelu);
  keys.insert(kernel_cache_topology(p));
  EXPECT_EQ(keys.size(), 8u);
}

// Regression: with a cache, the tuner rejected engine 16's depthwise backward-filter plans and
// served a 3-8x slower engine (kernel_cache.h); only forward takes one.
TEST(KernelCacheApplies, ToForwardConvolutionsOnly) {
  ConvProblem p = depthwise(144, 56, 1);
  EXPECT_TRUE(kernel_cache_applies(p));
  p.post_ops.push(PostOpKind::kBias);
  EXPECT_TRUE(kernel_cache_applies(p));
  for (Direction dir : {Direction::kBackwardFilter, Direction::kBackwardData}) {
    p.direction = dir;
    EXPECT_FALSE(kernel_cache_applies(p)) << to_string(dir);
  }
}

TEST(KernelCaches, OneCachePerTopologyMadeOnce) {
  const ConvProblem a = depthwise(96, 56, 1);
  const ConvProblem b = depthwise(144, 28, 2);  // same topology
  ConvProblem c = a;
  c.groups = 1;  // another topology
  KernelCaches caches;
  // cuDNN makes and finalizes a kernel cache without a device too.
  StatusOr<std::shared_ptr<const KernelCache>> first = caches.get(a);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  StatusOr<std::shared_ptr<const KernelCache>> second = caches.get(b);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(first->get(), second->get());
  StatusOr<std::shared_ptr<const KernelCache>> third = caches.get(c);
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_NE(first->get(), third->get());
  EXPECT_EQ(caches.size(), 2u);
}

TEST(KernelCaches, ACacheOutlivesItsOwnerWithItsGraph) {
  std::shared_ptr<const KernelCache> kept;
  const int64_t before = live_descriptor_count();
  {
    KernelCaches caches;
    StatusOr<std::shared_ptr<const KernelCache>> c = caches.get(depthwise(32, 28, 1));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    kept = *c;
  }
  EXPECT_GT(live_descriptor_count(), before) << "the cache and its graph are kept by the plan";
  EXPECT_NE(kept->descriptor.get(), nullptr);
  kept.reset();
  EXPECT_EQ(live_descriptor_count(), before);
}

TEST(KernelCaches, ThreadsAskingForOneTopologyAtOnceShareOneCache) {
  const ConvProblem p = depthwise(96, 56, 1);
  KernelCaches caches;
  std::vector<const KernelCache*> got(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      StatusOr<std::shared_ptr<const KernelCache>> c = caches.get(p);
      if (c.ok()) got[i] = c->get();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_NE(got[0], nullptr);
  for (const KernelCache* g : got) EXPECT_EQ(g, got[0]);
  EXPECT_EQ(caches.size(), 1u);
}

TEST(CudnnBackendOptions, KernelCacheIsOnByDefaultAndReadFromTheEnvironment) {
  unsetenv("CONVPLAN_KERNEL_CACHE");
  StatusOr<CudnnBackendOptions> o = CudnnBackendOptions::from_environment();
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_TRUE(o->kernel_cache);
  setenv("CONVPLAN_KERNEL_CACHE", "off", 1);
  o = CudnnBackendOptions::from_environment();
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_FALSE(o->kernel_cache);
  setenv("CONVPLAN_KERNEL_CACHE", "sometimes", 1);
  o = CudnnBackendOptions::from_environment();
  unsetenv("CONVPLAN_KERNEL_CACHE");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("CONVPLAN_KERNEL_CACHE='sometimes'"), std::string::npos)
      << o.status().to_string();
}

}  // namespace
}  // namespace convplan::cudnn_detail
