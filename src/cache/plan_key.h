// The key of a cached plan inside one handle's map: the problem and the id of the policy key it
// was tuned under. Internal to src/cache.
//
// The hash and the comparison are for the hit path: no string building, no allocation, and
// cheaper than ConvProblem::hash() (FNV-1a byte by byte: stable across processes, which a map
// inside one process does not need) and the defaulted == (one memcmp call per array).
#pragma once

#include <cstddef>  // offsetof
#include <cstdint>
#include <cstring>

#include "convplan/problem.h"

namespace convplan::cache_detail {

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

inline uint64_t word(int64_t v) { return static_cast<uint64_t>(v); }

// Equal problems (==) hash equally. A sum of products with distinct odd constants: the products
// are independent, so they pipeline, unlike a chain of combine steps. Entries past spatial_dims
// are included (validate() keeps them at their defaults, and == compares them anyway); strides
// only with the explicit layout (zeros otherwise); collisions only cost an extra comparison.
inline uint64_t problem_hash(const ConvProblem& p) {
  const uint64_t header = word(static_cast<int64_t>(p.direction)) | word(p.spatial_dims) << 4 |
                          word(static_cast<int64_t>(p.data_type)) << 8 |
                          word(static_cast<int64_t>(p.compute_type)) << 12 |
                          word(static_cast<int64_t>(p.layout)) << 16 |
                          word(p.allow_tensor_cores ? 1 : 0) << 20;
  uint64_t h = header * 0x9e3779b97f4a7c15ull + word(p.n) * 0xc2b2ae3d27d4eb4full +
               word(p.c) * 0x165667b19e3779f9ull + word(p.k) * 0xd6e8feb86659fd93ull +
               word(p.groups) * 0xa0761d6478bd642full;
  uint64_t g = 0;
  for (int d = 0; d < kMaxSpatialDims; ++d) {
    const uint64_t shift = 13 * static_cast<uint64_t>(d);
    g += (word(p.input[d]) << shift) * 0xe7037ed1a0b428dbull +
         (word(p.filter[d]) << shift) * 0x8ebc6af09c88c6e3ull +
         (word(p.stride[d]) << shift) * 0x589965cc75374cc3ull +
         (word(p.dilation[d]) << shift) * 0x1d8e4e27c47d124full +
         (word(p.pad_before[d]) << shift) * 0xff51afd7ed558ccdull +
         (word(p.pad_after[d]) << shift) * 0xc4ceb9fe1a85ec53ull;
  }
  if (p.layout == Layout::kExplicit) {
    for (int d = 0; d < kMaxTensorRank; ++d) {
      g += word(p.x_strides[d]) * (0x9e3779b97f4a7c15ull + 2 * static_cast<uint64_t>(d)) +
           word(p.y_strides[d]) * (0xc2b2ae3d27d4eb4full + 2 * static_cast<uint64_t>(d)) +
           word(p.w_strides[d]) * (0x165667b19e3779f9ull + 2 * static_cast<uint64_t>(d));
    }
  }
  h += (g ^ (g >> 29)) * 0x94d049bb133111ebull;
  h += double_bits(p.alpha) * 0xbf58476d1ce4e5b9ull + double_bits(p.beta) * 0x2545f4914f6cdd1dull;
  // The post-op chain: a conv with "bias+relu" and the same conv with "bias" are different plans.
  for (int i = 0; i < p.post_ops.count && i < kMaxPostOps; ++i) {
    const PostOp& op = p.post_ops.ops[static_cast<size_t>(i)];
    h += (word(static_cast<int64_t>(op.kind) + 1) + double_bits(op.scale) * 0x9e3779b97f4a7c15ull) *
         (0x8ebc6af09c88c6e3ull + 2 * static_cast<uint64_t>(i));
  }
  return h;
}

// The same answer as ==, in three comparisons of contiguous memory instead of one per array.
inline bool same_problem(const ConvProblem& a, const ConvProblem& b) {
  static_assert(
      offsetof(ConvProblem, dilation) == offsetof(ConvProblem, input) + 5 * sizeof(SpatialDims),
      "the six SpatialDims of ConvProblem are expected to be contiguous");
  static_assert(offsetof(ConvProblem, y_strides) ==
                    offsetof(ConvProblem, x_strides) + 2 * sizeof(TensorStrides),
                "the three TensorStrides of ConvProblem are expected to be contiguous");
  return a.n == b.n && a.c == b.c && a.k == b.k && a.groups == b.groups &&
         a.direction == b.direction && a.spatial_dims == b.spatial_dims &&
         a.data_type == b.data_type && a.compute_type == b.compute_type &&
         a.allow_tensor_cores == b.allow_tensor_cores && a.layout == b.layout &&
         a.alpha == b.alpha && a.beta == b.beta &&
         std::memcmp(&a.input, &b.input, 6 * sizeof(SpatialDims)) == 0 &&
         std::memcmp(&a.x_strides, &b.x_strides, 3 * sizeof(TensorStrides)) == 0 &&
         a.post_ops == b.post_ops;
}

struct PlanKey {
  ConvProblem problem;
  uint32_t policy_id = 0;
  bool operator==(const PlanKey& o) const {
    return policy_id == o.policy_id && same_problem(problem, o.problem);
  }
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
    return static_cast<size_t>(finalize(problem_hash(p) + policy_id * 0x9e3779b97f4a7c15ull));
  }
};

struct PlanKeyEqual {
  using is_transparent = void;
  bool operator()(const PlanKey& a, const PlanKey& b) const { return a == b; }
  bool operator()(const PlanKeyView& a, const PlanKey& b) const {
    return a.policy_id == b.policy_id && same_problem(*a.problem, b.problem);
  }
  bool operator()(const PlanKey& a, const PlanKeyView& b) const { return (*this)(b, a); }
};

}  // namespace convplan::cache_detail
