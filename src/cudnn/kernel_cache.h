// KernelCaches: cuDNN's kernel caches (CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR, cuDNN >= 9.5) of one
// device, one per graph topology, so that the plan of a runtime-compiled engine for one shape can
// take the kernel cuDNN compiled for another shape of the same topology instead of compiling
// again (0.2-1 s a plan on the H200: MobileNetV2's depthwise layers, each a shape of its own, paid
// it once per layer). cuDNN keeps kernels only for dynamic-shape graphs, so the plans that use a
// cache are built on one (build_plan). Internal to src/cudnn.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "convplan/problem.h"
#include "convplan/status.h"
#include "core/mutex.h"
#include "cudnn/descriptor.h"
#include "cudnn/graph.h"

namespace convplan::cudnn_detail {

// What a kernel cache is shared over: everything that shapes the graph's operations and their
// types, not the sizes: direction, types, layout, tensor cores, dense/grouped/depthwise, beta and
// the post-op chain, e.g. "fwd/bf16/f32/nhwc/tc1/depthwise/beta0/bias+relu".
std::string kernel_cache_topology(const ConvProblem& problem);

// Whether the plans of `problem`'s runtime-compiled engines are built with a kernel cache:
// forward convolutions only. With a cache, the tuner's check rejected engine 16's plans on four
// depthwise stride-1 backward-filter layers of MobileNetV2 at b256 (each a later shape of the
// topology) and served engine 19, 3-8x slower: its plans summed 9.01 ms against 4.09 ms without a
// cache, with kernel_cache_finalize_mutex() held, so not from concurrent finalization (H100,
// 2026-12-06; 8.77 against 3.97 ms before the lock). Built one at a time at batch 8, the same
// engines' cached backward plans matched the reference: the wrong results depend on the shapes.
bool kernel_cache_applies(const ConvProblem& problem);

// One topology's cache, with the device-less dynamic-shape graph it was finalized with (which
// must live as long as it).
struct KernelCache {
  ConvGraph graph;
  BackendDescriptor descriptor;
};

// Held around the finalization of every plan built with a kernel cache, in the whole process
// (every backend's caches): cuDNN 9.19 corrupted its heap (abort in free() under
// ExecutionPlan::finalize_internal, in libcudnn_engines_runtime_compiled) when threads finalized
// plans with a kernel cache at once, in 3 of 3 runs of `convplan bench --suite mobilenet_v2
// --prepare-threads 4` on an H200 (2026-12-06). Plans without a cache still finalize in parallel,
// as the compile pool's have since 2026-12-04.
Mutex& kernel_cache_finalize_mutex();

class KernelCaches {
 public:
  // The cache of `problem`'s topology, made the first time: finalized with a dynamic-shape graph
  // of the problem built for no device, which lives as long as the cache (so no handle or plan
  // the cache was first used with must outlive it). Shared: a plan finalized with the cache keeps
  // it alive. Thread-safe.
  StatusOr<std::shared_ptr<const KernelCache>> get(const ConvProblem& problem);
  // How many topologies have a cache.
  size_t size() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<const KernelCache>> caches_ GUARDED_BY(mu_);
};

}  // namespace convplan::cudnn_detail
