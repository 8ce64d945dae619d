// ConvProblem::validate(): every impossible problem is refused with a message that names the
// field and its value. Checks run in an order where each one may rely on the ones before it
// (indices are only used once spatial_dims is known to be 1..3, output sizes only once the sizes,
// strides and dilations are positive), and size arithmetic is done in 128 bits so that no
// overflow can happen on the way to the verdict.
#include <algorithm>
#include <cmath>
#include <string>

#include "convplan/problem.h"
#include "core/problem_checks.h"

namespace convplan {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string indexed(const char* field, int d) {
  return std::string(field) + "[" + std::to_string(d) + "]";
}

// a * b, saturating at kSaturated (both factors are >= 0).
constexpr __int128 kSaturated = static_cast<__int128>(1) << 100;
__int128 mul_saturating(__int128 a, __int128 b) {
  if (a == 0 || b == 0) return 0;
  if (a >= kSaturated / b) return kSaturated;
  return a * b;
}

std::string int128_to_string(__int128 v) {
  if (v >= kSaturated) return "more than 2^100";
  if (v == 0) return "0";
  std::string s;
  const bool negative = v < 0;
  if (negative) v = -v;
  while (v > 0) {
    s.push_back(static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  if (negative) s.push_back('-');
  std::reverse(s.begin(), s.end());
  return s;
}

}  // namespace

namespace detail {

Status check_spatial_dims(int spatial_dims) {
  if (spatial_dims < 1 || spatial_dims > kMaxSpatialDims) {
    return invalid_argument("spatial_dims=" + std::to_string(spatial_dims) + " must be 1, 2 or 3");
  }
  return ok_status();
}

Status check_at_least(const char* field, int64_t value, int64_t minimum) {
  if (value < minimum) {
    return invalid_argument(std::string(field) + "=" + str(value) + " must be >= " + str(minimum));
  }
  return ok_status();
}

Status check_spatial_at_least(const char* field, const SpatialDims& v, int spatial_dims,
                              int64_t minimum) {
  for (int d = 0; d < spatial_dims; ++d) {
    if (v[d] < minimum) {
      return invalid_argument(indexed(field, d) + "=" + str(v[d]) + " must be >= " + str(minimum));
    }
  }
  return ok_status();
}

Status check_spatial_defaults(const char* field, const SpatialDims& v, int spatial_dims,
                              int64_t default_value) {
  for (int d = spatial_dims; d < kMaxSpatialDims; ++d) {
    if (v[d] != default_value) {
      return invalid_argument(indexed(field, d) + "=" + str(v[d]) +
                              " is past spatial_dims=" + std::to_string(spatial_dims) +
                              " and must stay at its default " + str(default_value));
    }
  }
  return ok_status();
}

Status check_enums(Direction direction, DataType data_type, DataType compute_type, Layout layout) {
  const auto d = static_cast<int>(direction);
  if (d < 0 || d > static_cast<int>(Direction::kBackwardFilter)) {
    return invalid_argument("direction=" + std::to_string(d) + " is not a direction");
  }
  for (auto [name, t] :
       {std::pair{"data_type", data_type}, std::pair{"compute_type", compute_type}}) {
    const auto v = static_cast<int>(t);
    if (v < 0 || v > static_cast<int>(DataType::kDouble)) {
      return invalid_argument(std::string(name) + "=" + std::to_string(v) + " is not a data type");
    }
  }
  const auto l = static_cast<int>(layout);
  if (l < 0 || l > static_cast<int>(Layout::kExplicit)) {
    return invalid_argument("layout=" + std::to_string(l) + " is not a layout");
  }
  return ok_status();
}

Status check_types(DataType data_type, DataType compute_type) {
  bool allowed = false;
  const char* rule = "";
  switch (data_type) {
    case DataType::kDouble:
      allowed = compute_type == DataType::kDouble;
      rule = "f64 data needs f64 compute";
      break;
    case DataType::kFloat:
      allowed = compute_type == DataType::kFloat;
      rule = "f32 data needs f32 compute";
      break;
    case DataType::kHalf:
      allowed = compute_type == DataType::kFloat || compute_type == DataType::kHalf;
      rule = "f16 data allows f32 or f16 compute";
      break;
    case DataType::kBFloat16:
      allowed = compute_type == DataType::kFloat || compute_type == DataType::kBFloat16;
      rule = "bf16 data allows f32 or bf16 compute";
      break;
  }
  if (!allowed) {
    return invalid_argument(std::string("compute_type=") + to_string(compute_type) +
                            " does not go with data_type=" + to_string(data_type) + " (" + rule +
                            ")");
  }
  return ok_status();
}

Status check_scaling(double alpha, double beta) {
  if (!std::isfinite(alpha))
    return invalid_argument("alpha=" + std::to_string(alpha) + " must be finite");
  if (!std::isfinite(beta))
    return invalid_argument("beta=" + std::to_string(beta) + " must be finite");
  return ok_status();
}

Status check_groups(int64_t groups, int64_t c, int64_t k, const char* c_name, const char* k_name) {
  if (c % groups != 0) {
    return invalid_argument("groups=" + str(groups) + " does not divide " + c_name + "=" + str(c));
  }
  if (k % groups != 0) {
    return invalid_argument("groups=" + str(groups) + " does not divide " + k_name + "=" + str(k));
  }
  return ok_status();
}

Status check_element_count(const char* tensor, const TensorStrides& dims, int rank) {
  __int128 count = 1;
  for (int d = 0; d < rank; ++d) count = mul_saturating(count, dims[d]);
  if (count > kMaxTensorElements) {
    const bool overflows = count > static_cast<__int128>(INT64_MAX);
    return invalid_argument(std::string(tensor) + " has " + int128_to_string(count) + " elements" +
                            (overflows ? ", which overflows int64 and is" : ",") +
                            " more than cuDNN's limit of 2^31-1 elements per tensor");
  }
  return ok_status();
}

__int128 output_size_wide(int64_t input, int64_t pad_before, int64_t pad_after, int64_t filter,
                          int64_t stride, int64_t dilation) {
  const __int128 extent = static_cast<__int128>(dilation) * (filter - 1) + 1;
  const __int128 span = static_cast<__int128>(input) + pad_before + pad_after - extent;
  return span < 0 ? 0 : span / stride + 1;
}

}  // namespace detail

namespace {

using detail::kMaxTensorElements;

// The tensor's logical dimensions, computed without overflow (sizes saturate at 2^100 and are
// only used once each has been checked against the element limit).
TensorStrides logical_dims(const ConvProblem& p, TensorRole tensor, const SpatialDims& out) {
  TensorStrides dims{};
  const int64_t cpg = p.c / p.groups;
  dims[0] = tensor == TensorRole::kW ? p.k : p.n;
  dims[1] = by_role(tensor, p.c, cpg, p.k);
  for (int d = 0; d < p.spatial_dims; ++d) {
    dims[2 + d] = by_role(tensor, p.input[d], p.filter[d], out[d]);
  }
  return dims;
}

// Explicit strides: each >= 1 for the tensor's rank, zero past it, and no two elements at one
// offset. Overlap is ruled out by the usual nesting rule: with the dimensions of size > 1 sorted
// by stride, each stride is at least the previous stride times the previous size. (A layout that
// interleaves dimensions without overlapping also fails the rule; cuDNN has no use for one.)
Status check_explicit_strides(const char* name, const TensorStrides& dims,
                              const TensorStrides& strides, int rank) {
  for (int d = 0; d < rank; ++d) {
    if (strides[d] < 1) {
      return invalid_argument(std::string(name) + "[" + std::to_string(d) +
                              "]=" + std::to_string(strides[d]) + " must be >= 1");
    }
  }
  for (int d = rank; d < kMaxTensorRank; ++d) {
    if (strides[d] != 0) {
      return invalid_argument(std::string(name) + "[" + std::to_string(d) +
                              "]=" + std::to_string(strides[d]) + " is past the tensor's rank " +
                              std::to_string(rank) + " and must stay 0");
    }
  }
  int order[kMaxTensorRank];
  int m = 0;
  for (int d = 0; d < rank; ++d)
    if (dims[d] > 1) order[m++] = d;
  std::stable_sort(order, order + m, [&](int a, int b) { return strides[a] < strides[b]; });
  for (int i = 1; i < m; ++i) {
    const int prev = order[i - 1], cur = order[i];
    const __int128 needed = static_cast<__int128>(strides[prev]) * dims[prev];
    if (strides[cur] < needed) {
      return invalid_argument(std::string(name) + " make elements overlap: " + name + "[" +
                              std::to_string(cur) + "]=" + std::to_string(strides[cur]) +
                              " is less than " + name + "[" + std::to_string(prev) +
                              "]=" + std::to_string(strides[prev]) + " times dim[" +
                              std::to_string(prev) + "]=" + std::to_string(dims[prev]));
    }
  }
  __int128 span = 1;
  for (int d = 0; d < rank; ++d) span += static_cast<__int128>(dims[d] - 1) * strides[d];
  if (span > kMaxTensorElements) {
    return invalid_argument(std::string(name) + " span " + int128_to_string(span) +
                            " elements, more than cuDNN's limit of 2^31-1 elements per tensor");
  }
  return ok_status();
}

// The chain: its own consistency, then what it asks of the rest of the problem.
Status check_post_ops(const PostOps& chain, Direction direction, double beta) {
  if (chain.count < 0 || chain.count > kMaxPostOps) {
    return invalid_argument("post_ops.count=" + std::to_string(chain.count) + " must be 0.." +
                            std::to_string(kMaxPostOps));
  }
  int bias = 0, add = 0;
  for (int i = 0; i < chain.count; ++i) {
    const PostOp& op = chain.ops[static_cast<size_t>(i)];
    const std::string field = "post_ops[" + std::to_string(i) + "]";
    const auto kind = static_cast<int>(op.kind);
    if (kind < 0 || kind >= kPostOpKinds) {
      return invalid_argument(field + ".kind=" + std::to_string(kind) + " is not a post-op");
    }
    if (!std::isfinite(op.scale)) return invalid_argument(field + ".scale must be finite");
    if (op.kind != PostOpKind::kAdd && op.scale != 1.0) {
      return invalid_argument(field + ".scale=" + std::to_string(op.scale) + " must be 1 for " +
                              to_string(op.kind) + " (only add has a scale)");
    }
    bias += op.kind == PostOpKind::kBias ? 1 : 0;
    add += op.kind == PostOpKind::kAdd ? 1 : 0;
  }
  if (bias > 1 || add > 1) {
    return invalid_argument("post_ops=" + chain.to_string() + " has more than one " +
                            (bias > 1 ? "bias" : "add") + " (one tensor of each at most)");
  }
  if (chain.count > 0 && direction != Direction::kForward) {
    return invalid_argument("post_ops=" + chain.to_string() + " is only for direction=fwd, not " +
                            to_string(direction) + " (a chain's gradient is the caller's part)");
  }
  if (chain.count > 0 && beta != 0.0) {
    return invalid_argument("beta=" + std::to_string(beta) + " must be 0 with post_ops=" +
                            chain.to_string() + " (a residual is the chain's add)");
  }
  return ok_status();
}

}  // namespace

Status ConvProblem::validate() const {
  using namespace detail;  // NOLINT: the shared checks are this function's vocabulary
  CONVPLAN_RETURN_IF_ERROR(check_spatial_dims(spatial_dims));
  CONVPLAN_RETURN_IF_ERROR(check_enums(direction, data_type, compute_type, layout));
  CONVPLAN_RETURN_IF_ERROR(check_at_least("n", n, 1));
  CONVPLAN_RETURN_IF_ERROR(check_at_least("c", c, 1));
  CONVPLAN_RETURN_IF_ERROR(check_at_least("k", k, 1));
  CONVPLAN_RETURN_IF_ERROR(check_at_least("groups", groups, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("input", input, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("filter", filter, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("pad_before", pad_before, spatial_dims, 0));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("pad_after", pad_after, spatial_dims, 0));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("stride", stride, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("dilation", dilation, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("input", input, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("filter", filter, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("pad_before", pad_before, spatial_dims, 0));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("pad_after", pad_after, spatial_dims, 0));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("stride", stride, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("dilation", dilation, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_groups(groups, c, k, "c", "k"));
  CONVPLAN_RETURN_IF_ERROR(check_types(data_type, compute_type));
  CONVPLAN_RETURN_IF_ERROR(check_scaling(alpha, beta));
  CONVPLAN_RETURN_IF_ERROR(check_post_ops(post_ops, direction, beta));

  SpatialDims out{1, 1, 1};
  for (int d = 0; d < spatial_dims; ++d) {
    const __int128 o =
        output_size_wide(input[d], pad_before[d], pad_after[d], filter[d], stride[d], dilation[d]);
    if (o == 0) {
      const __int128 extent = static_cast<__int128>(dilation[d]) * (filter[d] - 1) + 1;
      return invalid_argument("output[" + std::to_string(d) + "]=0 is empty: input[" +
                              std::to_string(d) + "]=" + str(input[d]) + " + pads " +
                              str(pad_before[d]) + "+" + str(pad_after[d]) +
                              " < dilation*(filter-1)+1=" + int128_to_string(extent));
    }
    // Larger than the element limit means y is too large; the check below says so.
    out[d] = o > kMaxTensorElements ? kMaxTensorElements + 1 : static_cast<int64_t>(o);
  }

  const int rank = spatial_dims + 2;
  const TensorStrides xd = logical_dims(*this, TensorRole::kX, out);
  const TensorStrides wd = logical_dims(*this, TensorRole::kW, out);
  const TensorStrides yd = logical_dims(*this, TensorRole::kY, out);
  CONVPLAN_RETURN_IF_ERROR(check_element_count("x", xd, rank));
  CONVPLAN_RETURN_IF_ERROR(check_element_count("w", wd, rank));
  CONVPLAN_RETURN_IF_ERROR(check_element_count("y", yd, rank));

  if (layout == Layout::kExplicit) {
    CONVPLAN_RETURN_IF_ERROR(check_explicit_strides("x_strides", xd, x_strides, rank));
    CONVPLAN_RETURN_IF_ERROR(check_explicit_strides("w_strides", wd, w_strides, rank));
    CONVPLAN_RETURN_IF_ERROR(check_explicit_strides("y_strides", yd, y_strides, rank));
  } else {
    for (auto [name, s] : {std::pair{"x_strides", &x_strides}, std::pair{"w_strides", &w_strides},
                           std::pair{"y_strides", &y_strides}}) {
      for (int d = 0; d < kMaxTensorRank; ++d) {
        if ((*s)[d] != 0) {
          return invalid_argument(std::string(name) + "[" + std::to_string(d) +
                                  "]=" + str((*s)[d]) +
                                  " must be 0 with layout=" + convplan::to_string(layout) +
                                  " (strides are only for layout=explicit)");
        }
      }
    }
  }
  return ok_status();
}

}  // namespace convplan
