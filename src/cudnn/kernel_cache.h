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

namespace convplan::cudnn_detail {

// What a kernel cache is shared over: everything that shapes the graph's operations and their
// types, not the sizes: direction, types, layout, tensor cores, dense/grouped/depthwise, beta and
// the post-op chain, e.g. "fwd/bf16/f32/nhwc/tc1/depthwise/beta0/bias+relu".
std::string kernel_cache_topology(const ConvProblem& problem);

// Whether the plans of `problem`'s runtime-compiled engines are built with a kernel cache:
// forward convolutions only. With a cache, engine 16's plan for a depthwise backward-filter shape
// that followed another shape of its topology gave wrong results (cuDNN 9.19 on an H100,
// MobileNetV2 at batch 256); the tuner's check rejected it but then served engine 19, 3-8x
// slower. Nothing measured the backward directions' gain, so they compile as before.
bool kernel_cache_applies(const ConvProblem& problem);

class KernelCaches {
 public:
  // The cache of `problem`'s topology, made the first time: finalized with a dynamic-shape graph
  // of the problem built for no device, which lives as long as the cache (so no handle or plan
  // the cache was first used with must outlive it). Shared: a plan finalized with the cache keeps
  // it alive. Thread-safe; cuDNN finalizes plans concurrently with one cache (cudnn-frontend's
  // parallel plan builds share theirs).
  StatusOr<std::shared_ptr<const BackendDescriptor>> get(const ConvProblem& problem);
  // How many topologies have a cache.
  size_t size() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<const BackendDescriptor>> caches_ GUARDED_BY(mu_);
};

}  // namespace convplan::cudnn_detail
