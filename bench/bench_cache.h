// What the cache benchmarks share: a PlanCache for timing tunes, independent of the environment.
#pragma once

#include <cstdio>
#include <memory>

#include "convplan/plan_cache.h"

namespace convplan {

// A cache over `backend` with room for every plan and the default policy (limited mode, not
// CONVPLAN_TUNE), so that runs compare alike; null, with the error printed, when it fails.
inline std::unique_ptr<PlanCache> make_bench_cache(std::shared_ptr<Backend> backend) {
  PlanCacheOptions options;
  options.backend = std::move(backend);
  options.capacity = 100000;
  options.policy = TunePolicy{};
  StatusOr<std::unique_ptr<PlanCache>> cache = PlanCache::create(std::move(options));
  if (!cache.ok()) {
    std::fprintf(stderr, "PlanCache::create: %s\n", cache.status().to_string().c_str());
    return nullptr;
  }
  return std::move(cache).value();
}

}  // namespace convplan
