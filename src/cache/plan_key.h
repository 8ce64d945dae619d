// The key of a cached plan inside one handle's map: the problem and the id of the policy key it
// was tuned under. Internal to src/cache.
//
// The hash is for the hit path: a few multiply-xor steps over the fields that == compares, with
// no string building and no allocation (ConvProblem::hash() is FNV-1a byte by byte: stable across
// processes, which a map inside one process does not need, and several times slower).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "convplan/problem.h"

namespace convplan::cache_detail {

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

inline uint64_t finalize(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

inline uint64_t double_bits(double d) {
  d += 0.0;  // -0.0 becomes +0.0: == has them equal, so the hash must too
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return bits;
}

// Equal problems (==) hash equally. Entries past spatial_dims are included: validate() keeps them
// at their defaults, and == compares them anyway.
inline uint64_t problem_hash(const ConvProblem& p) {
  uint64_t h = static_cast<uint64_t>(p.direction) | static_cast<uint64_t>(p.spatial_dims) << 4 |
               static_cast<uint64_t>(p.data_type) << 8 | static_cast<uint64_t>(p.compute_type) << 12 |
               static_cast<uint64_t>(p.layout) << 16 |
               static_cast<uint64_t>(p.allow_tensor_cores) << 20;
  h = mix(h, static_cast<uint64_t>(p.n));
  h = mix(h, static_cast<uint64_t>(p.c));
  h = mix(h, static_cast<uint64_t>(p.k));
  h = mix(h, static_cast<uint64_t>(p.groups));
  for (int d = 0; d < kMaxSpatialDims; ++d) {
    // The geometry of one dimension, packed: sizes rarely exceed 2^16 and collisions only cost
    // an extra == comparison.
    h = mix(h, static_cast<uint64_t>(p.input[d]) ^ static_cast<uint64_t>(p.filter[d]) << 24 ^
                   static_cast<uint64_t>(p.stride[d]) << 40 ^
                   static_cast<uint64_t>(p.dilation[d]) << 52);
    h = mix(h, static_cast<uint64_t>(p.pad_before[d]) ^ static_cast<uint64_t>(p.pad_after[d]) << 32);
  }
  if (p.layout == Layout::kExplicit) {
    for (int d = 0; d < kMaxTensorRank; ++d) {
      h = mix(h, static_cast<uint64_t>(p.x_strides[d]) ^ static_cast<uint64_t>(p.w_strides[d]) << 21 ^
                     static_cast<uint64_t>(p.y_strides[d]) << 42);
    }
  }
  h = mix(h, double_bits(p.alpha));
  h = mix(h, double_bits(p.beta));
  return h;
}

struct PlanKey {
  ConvProblem problem;
  uint32_t policy_id = 0;
  bool operator==(const PlanKey&) const = default;
};

// A key to look up without copying the problem (heterogeneous lookup).
struct PlanKeyView {
  const ConvProblem* problem;
  uint32_t policy_id;
};

struct PlanKeyHash {
  using is_transparent = void;
  size_t operator()(const PlanKey& k) const { return hash(k.problem, k.policy_id); }
  size_t operator()(const PlanKeyView& k) const { return hash(*k.problem, k.policy_id); }
  static size_t hash(const ConvProblem& p, uint32_t policy_id) {
    return static_cast<size_t>(finalize(mix(problem_hash(p), policy_id)));
  }
};

struct PlanKeyEqual {
  using is_transparent = void;
  bool operator()(const PlanKey& a, const PlanKey& b) const { return a == b; }
  bool operator()(const PlanKeyView& a, const PlanKey& b) const {
    return a.policy_id == b.policy_id && *a.problem == b.problem;
  }
  bool operator()(const PlanKey& a, const PlanKeyView& b) const { return (*this)(b, a); }
};

}  // namespace convplan::cache_detail
