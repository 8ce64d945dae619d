// Exact problem rewrites: a convolution computed as another convolution between transforms of
// its tensors, so that a backend's engines for the rewritten problem become candidates for the
// original one. Two kinds, composable in one rewrite:
//   space-to-depth, block b dividing every stride: input (N, C, H...) -> (N, b^D*C, ~H/b...),
//     filter (K, C, R...) -> (K, b^D*C, ceil((R+e)/b)...) zero-filled, stride s/b. The padding is
//     folded into the transforms (the filter's leading offset e, the rewritten padding and a
//     cropped or zero-filled input), so odd sizes and asymmetric padding stay exact.
//   channel padding: the rewritten C (and K) rounded up to a multiple of 4, 8, 16 or 32 with zeros.
//   unfolding of the last spatial dimension (forward only): its filter taps become channels, so
//     that the rewritten problem has a filter of width 1, stride 1 and no padding there: input
//     (N, C, H..., W) -> (N, S*C, H..., OW), x'[o][s*C + c] = x[o*stride + s - pad] (zero outside),
//     filter (K, C, R..., S) -> (K, S*C, R..., 1). With space-to-depth, the other dimensions are
//     blocked and the last one unfolded (channels b^(D-1) * S * C). Few-channel stems starve the
//     tensor cores on their taps; unfolded, each tap reads a long contiguous channel vector.
// The rewritten channel index is m*C + c, m the row-major flat index of the block offsets (of the
// taps, in an unfolded dimension). Forward reads transformed x and w (and writes y, or a K-padded
// y' cropped after); backward-data writes x' (mapped back by depth-to-space, alpha/beta applied
// there); backward-filter writes w' (gathered back). Names: [s2d<b>][u][c<m>][k<m>], e.g. "s2d2",
// "s2d2c16", "c8", "c8k8", "s2d2uc32".
//
// with_rewrites() wraps a Backend: its candidates gain, for each rewrite that applies and may pay,
// the inner backend's candidates of the rewritten problem, their EngineConfig::rewrite set to the
// rewrite's name ("s2d2+eng62:k3=1"). A plan of such a config runs pre-transforms, the inner plan
// and the post-transform on the handle's stream with its scratch carved out of the plan's
// workspace (workspace_bytes = inner + scratch), so the tuner times and validates it end to end
// against the original problem and the plan cache clones it like any plan.
// CONVPLAN_REWRITES=off (or TunePolicy::rewrites = false) turns rewrites off; an errata rule with
// "rewrite" disables one (see tune_policy.h).
//
// Values and pure functions; thread-safe. The wrapped backend is as thread-safe as the inner one;
// a rewritten plan, like every plan, is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "convplan/backend.h"
#include "convplan/export.h"
#include "convplan/problem.h"
#include "convplan/status.h"

namespace convplan {

// Which rewrite: block 1 = no space-to-depth; multiples 1 = no padding.
struct CONVPLAN_EXPORT RewriteSpec {
  int64_t block = 1;
  int64_t c_multiple = 1;    // the rewritten C (b^D * C; unfolded b^(D-1) * S * C) rounded up
  int64_t k_multiple = 1;    // K rounded up to this
  bool unfold = false;       // the last spatial dimension unfolded into channels (forward only)
  std::string name() const;  // "s2d2c16"; "" for the identity
  // Parses a name; errors name the text and the offending part.
  static StatusOr<RewriteSpec> parse(std::string_view name);
  bool operator==(const RewriteSpec&) const = default;
};

struct CONVPLAN_EXPORT Rewrite {
  RewriteSpec spec;
  ConvProblem original;
  ConvProblem rewritten;
  SpatialDims filter_offset{0, 0, 0};  // e: the filter's leading zeros before blocking

  std::string name() const { return spec.name(); }
  // Whether the tensor is transformed, i.e. has a rewritten copy in scratch.
  bool transforms(TensorRole tensor) const;
  // Bytes of every rewritten copy, each rounded up to 256: the workspace beyond the inner plan's.
  int64_t scratch_bytes() const;
};

// The rewrite `spec` of `problem`; kNotSupported naming the reason where it is not exact or not
// defined (explicit strides, dilation, groups, a block that does not divide a stride, the
// identity, an unfold of a backward direction), kInvalidArgument for an invalid problem.
CONVPLAN_EXPORT StatusOr<Rewrite> make_rewrite(const ConvProblem& problem, const RewriteSpec& spec);
// The rewrites with_rewrites() tries for `problem`, in this order: space-to-depth for every block
// dividing all strides when the problem has few channels (C < 16), each alone and with its
// channels padded to 4, 8 or 16 where that changes them; channel padding alone where C is not a
// multiple of 8; where K is not a multiple of 8, each of these pads K to 8 too, and K padding
// alone is added. Forward problems with few channels and a last filter dimension wider than 1
// also get the unfold of that dimension, alone and after each space-to-depth block, with the
// channels padded to a multiple of 32 (a whole tensor-core K-slice). Duplicates (the same rewritten
// problem) are left out. Problems with many channels get none: space-to-depth and padding pay where
// few channels starve the tensor cores.
CONVPLAN_EXPORT std::vector<Rewrite> applicable_rewrites(const ConvProblem& problem);

// The host twin of the transform kernels. to_rewritten: dst (the rewritten tensor) from src (the
// original); else dst = alpha * (original tensor gathered from the rewritten src) + beta * dst.
// Buffers hold `type` elements in the problems' layouts (packed, span_elements() each).
CONVPLAN_EXPORT Status transform_host(const Rewrite& rewrite, TensorRole tensor, bool to_rewritten,
                                      DataType type, const void* src, void* dst, double alpha = 1.0,
                                      double beta = 0.0);

// Wraps `inner` (see above). Reads CONVPLAN_REWRITES once, here: "off"/"0" gives a wrapper that
// adds no candidate (it still builds tagged configs, e.g. from a database).
CONVPLAN_EXPORT std::shared_ptr<Backend> with_rewrites(std::shared_ptr<Backend> inner);

}  // namespace convplan
