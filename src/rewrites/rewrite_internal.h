// What the rewriting backend and the host twin share: the transform of one tensor as a
// TransformDesc, and the order of the transforms around the inner plan.
#pragma once

#include <vector>

#include "convplan/rewrite.h"
#include "rewrites/transform.h"

namespace convplan::rewrites {

// The gather between `tensor` of rewrite.original (A) and of rewrite.rewritten (B).
// REQUIRES: rewrite.transforms(tensor).
TransformDesc transform_desc(const Rewrite& rewrite, TensorRole tensor, bool to_rewritten,
                             double alpha, double beta);

struct Step {
  TensorRole tensor;
  bool to_rewritten;
};
// The transforms before the inner plan (inputs) and after it (the output, when transformed).
std::vector<Step> pre_steps(const Rewrite& rewrite);
std::vector<Step> post_steps(const Rewrite& rewrite);

// Scratch offsets of each transformed tensor within the rewrite's scratch (-1: none).
int64_t scratch_offset(const Rewrite& rewrite, TensorRole tensor);
inline constexpr int64_t kScratchAlign = 256;

}  // namespace convplan::rewrites
