// The transforms of a rewrite as TransformDescs, their order, their scratch, and the host twin of
// the kernel.
#include <cstring>

#include "convplan/reference.h"
#include "convplan/rewrite.h"
#include "rewrites/rewrite_internal.h"

namespace convplan {
namespace rewrites {
namespace {

ElemType elem_type(DataType t) {
  switch (t) {
    case DataType::kHalf: return ElemType::kF16;
    case DataType::kBFloat16: return ElemType::kBF16;
    case DataType::kDouble: return ElemType::kF64;
    default: return ElemType::kF32;
  }
}

void copy_shape(const TensorShape& s, int64_t* dims, int64_t* strides) {
  for (int i = 0; i < s.rank; ++i) {
    dims[i] = s.dims[i];
    strides[i] = s.strides[i];
  }
}

// Each spatial dimension's step, window and offset (transform.h): y's geometry is unchanged
// (only its channels, K, may be padded); a blocked dimension has step = window = block, x read
// from 0 and w shifted by the filter's leading zeros; an unfolded one reads x's taps at the
// original stride from -pad, and w's taps whole (one position of window S).
void set_geometry(const Rewrite& r, TensorRole tensor, TransformDesc& t) {
  const ConvProblem& p = r.original;
  for (int d = 0; d < p.spatial_dims; ++d) {
    if (tensor == TensorRole::kY) continue;  // 1, 1, 0
    const bool unfolded = r.spec.unfold && d == p.spatial_dims - 1;
    const bool x = tensor == TensorRole::kX;
    if (!unfolded) {
      t.step[d] = t.window[d] = static_cast<int32_t>(r.spec.block);
      t.offset[d] = x ? 0 : r.filter_offset[d];
    } else if (x) {
      t.step[d] = static_cast<int32_t>(p.stride[d]);
      t.window[d] = static_cast<int32_t>(p.filter[d]);
      t.offset[d] = p.pad_before[d];
    } else {
      t.step[d] = t.window[d] = static_cast<int32_t>(p.filter[d]);
    }
  }
}

}  // namespace

TransformDesc transform_desc(const Rewrite& r, TensorRole tensor, bool to_rewritten, double alpha,
                             double beta) {
  TransformDesc t;
  t.to_rewritten = to_rewritten;
  t.elem = elem_type(r.original.data_type);
  t.elem_bytes = static_cast<int32_t>(size_of(r.original.data_type));
  t.spatial_dims = r.original.spatial_dims;
  set_geometry(r, tensor, t);
  const TensorShape a = r.original.shape_of(tensor);
  const TensorShape b = r.rewritten.shape_of(tensor);
  copy_shape(a, t.a_dims, t.a_strides);
  copy_shape(b, t.b_dims, t.b_strides);
  const TensorShape& dst = to_rewritten ? b : a;
  const bool last = r.original.layout == Layout::kChannelsLast;
  for (int i = 0; i < dst.rank; ++i) {
    // Memory order: (d0, c, spatial...) or (d0, spatial..., c).
    int logical = i;
    if (last && i >= 1) logical = i == dst.rank - 1 ? 1 : i + 1;
    t.dst_mem_to_logical[i] = logical;
    t.dst_mem_dims[i] = dst.dims[logical];
  }
  t.dst_elements = dst.elements();
  t.alpha = alpha;
  t.beta = beta;
  return t;
}

std::vector<Step> pre_steps(const Rewrite& r) {
  std::vector<Step> steps;
  const TensorRole out = r.original.output_tensor();
  for (TensorRole t : kTensorRoles) {
    if (t != out && r.transforms(t)) steps.push_back({t, true});
  }
  return steps;
}

std::vector<Step> post_steps(const Rewrite& r) {
  const TensorRole out = r.original.output_tensor();
  if (!r.transforms(out)) return {};
  return {{out, false}};
}

int64_t scratch_offset(const Rewrite& r, TensorRole tensor) {
  if (!r.transforms(tensor)) return -1;
  int64_t offset = 0;
  for (TensorRole t : kTensorRoles) {
    if (t == tensor) return offset;
    if (!r.transforms(t)) continue;
    const int64_t bytes = r.rewritten.shape_of(t).span_elements() * size_of(r.rewritten.data_type);
    offset += (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
  }
  return -1;
}

}  // namespace rewrites

Status transform_host(const Rewrite& r, TensorRole tensor, bool to_rewritten, DataType type,
                      const void* src, void* dst, double alpha, double beta) {
  if (!r.transforms(tensor)) {
    return invalid_argument("rewrite " + r.name() + " does not transform " + to_string(tensor));
  }
  const rewrites::TransformDesc t = rewrites::transform_desc(r, tensor, to_rewritten, alpha, beta);
  const int64_t elem = size_of(type);
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for (int64_t i = 0; i < t.dst_elements; ++i) {
    const int64_t from = rewrites::source_offset(t, i);
    double v = 0.0;
    if (from >= 0) from_data_type(type, s + from * elem, &v, 1);
    if (!to_rewritten && t.scaled()) {
      double old = 0.0;
      if (beta != 0.0) from_data_type(type, d + i * elem, &old, 1);
      v = alpha * v + beta * old;
    }
    to_data_type(type, &v, d + i * elem, 1);
  }
  return ok_status();
}

}  // namespace convplan
