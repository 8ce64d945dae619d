#include "cudnn/kernel_cache.h"

#include <utility>

#include "cudnn/check.h"

namespace convplan::cudnn_detail {
namespace {

const char* group_kind(const ConvProblem& p) {
  if (p.groups == 1) return "dense";
  return p.groups == p.c && p.groups == p.k ? "depthwise" : "grouped";
}

}  // namespace

std::string kernel_cache_topology(const ConvProblem& p) {
  std::string key = to_string(p.direction);
  for (const char* part :
       {to_string(p.data_type), to_string(p.compute_type), to_string(p.layout),
        p.allow_tensor_cores ? "tc1" : "tc0", group_kind(p), p.beta != 0 ? "beta1" : "beta0"}) {
    key += '/';
    key += part;
  }
  key += '/';
  key += p.post_ops.to_string();
  return key;
}

bool kernel_cache_applies(const ConvProblem& problem) {
  return problem.direction == Direction::kForward;
}

Mutex& kernel_cache_finalize_mutex() {
  static Mutex* const mu = new Mutex;  // never destroyed: plans may finalize during exit
  return *mu;
}

StatusOr<std::shared_ptr<const KernelCache>> KernelCaches::get(const ConvProblem& problem) {
  const std::string key = kernel_cache_topology(problem);
  MutexLock lock(mu_);
  auto it = caches_.find(key);
  if (it != caches_.end()) return it->second;
  // Made under the lock (about a millisecond, once per topology): two threads must not make two
  // caches of one topology.
  auto made = std::make_shared<KernelCache>();
  CONVPLAN_ASSIGN_OR_RETURN(made->graph, build_conv_graph(nullptr, problem, true));
  CONVPLAN_ASSIGN_OR_RETURN(made->descriptor,
                            BackendDescriptor::create(CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR));
  const cudnnBackendDescriptor_t raw_graph = made->graph.graph.get();
  CONVPLAN_CUDNN_CHECK(made->descriptor.set(CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_graph));
  CONVPLAN_CUDNN_CHECK(made->descriptor.finalize());
  caches_.emplace(key, made);
  return std::shared_ptr<const KernelCache>(std::move(made));
}

size_t KernelCaches::size() const {
  MutexLock lock(mu_);
  return caches_.size();
}

}  // namespace convplan::cudnn_detail
