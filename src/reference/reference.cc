// The float64 reference convolution. One loop nest serves all three directions: it walks every
// (output element, filter tap) pair of the forward relation
//   y[n, g*Kg+kk, o] += x[n, g*Cg+cc, o*stride - pad_before + r*dilation] * w[g*Kg+kk, cc, r]
// and accumulates into whichever tensor the direction writes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "convplan/reference.h"
#include "core/hashed_values.h"

namespace convplan {
namespace {

// Offset of a logical index (N/K, C, d0, d1, d2) in a tensor; unused spatial dims are index 0.
struct Indexer {
  TensorStrides strides{};
  int rank = 0;
  int64_t operator()(int64_t a, int64_t b, const int64_t* s) const {
    int64_t off = a * strides[0] + b * strides[1];
    for (int d = 2; d < rank; ++d) off += s[d - 2] * strides[d];
    return off;
  }
};

Indexer indexer(const TensorShape& s) { return Indexer{s.strides, s.rank}; }

Status check_size(const char* name, const std::vector<double>& v, const TensorShape& s) {
  if (static_cast<int64_t>(v.size()) < s.span_elements()) {
    return invalid_argument(std::string(name) + " holds " + std::to_string(v.size()) +
                            " elements; the problem needs " + std::to_string(s.span_elements()));
  }
  return ok_status();
}

uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (e <= 0) {                                               // subnormal or zero
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent
  return static_cast<uint16_t>(sign | half);
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

float bf16_bits_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace

double apply_post_ops(const PostOps& chain, double v, double bias, double residual) {
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  for (int i = 0; i < chain.count && i < kMaxPostOps; ++i) {
    const PostOp& op = chain.ops[static_cast<size_t>(i)];
    switch (op.kind) {
      case PostOpKind::kBias: v += bias; break;
      case PostOpKind::kAdd: v += op.scale * residual; break;
      case PostOpKind::kRelu: v = v > 0 ? v : 0.0; break;
      case PostOpKind::kRelu6: v = std::min(std::max(v, 0.0), 6.0); break;
      case PostOpKind::kGelu: v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); break;
      case PostOpKind::kGeluTanh:
        v = 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v)));
        break;
      case PostOpKind::kSilu: v = v / (1.0 + std::exp(-v)); break;
      case PostOpKind::kSigmoid: v = 1.0 / (1.0 + std::exp(-v)); break;
      case PostOpKind::kTanh: v = std::tanh(v); break;
      case PostOpKind::kElu: v = v > 0 ? v : std::expm1(v); break;
    }
  }
  return v;
}

Status reference_convolution(const ConvProblem& p, std::vector<double>& x, std::vector<double>& w,
                             std::vector<double>& y) {
  return reference_convolution(p, x, w, y, {}, {});
}

Status reference_convolution(const ConvProblem& p, std::vector<double>& x, std::vector<double>& w,
                             std::vector<double>& y, const std::vector<double>& bias,
                             const std::vector<double>& residual) {
  CONVPLAN_RETURN_IF_ERROR(p.validate());
  const TensorShape xs = p.x_shape(), ws = p.w_shape(), ys = p.y_shape();
  CONVPLAN_RETURN_IF_ERROR(check_size("x", x, xs));
  CONVPLAN_RETURN_IF_ERROR(check_size("w", w, ws));
  CONVPLAN_RETURN_IF_ERROR(check_size("y", y, ys));
  if (p.post_ops.has(PostOpKind::kBias)) {
    CONVPLAN_RETURN_IF_ERROR(check_size("bias", bias, p.bias_shape()));
  }
  if (p.post_ops.has(PostOpKind::kAdd)) {
    CONVPLAN_RETURN_IF_ERROR(check_size("residual", residual, p.residual_shape()));
  }
  const int64_t bias_stride = p.bias_shape().strides[1];
  const Indexer xi = indexer(xs), wi = indexer(ws), yi = indexer(ys);

  // The written tensor's accumulator, in its own layout (so strided gaps stay untouched).
  const TensorRole out = p.output_tensor();
  const TensorShape& os = by_role(out, xs, ws, ys);
  std::vector<double>& ov = by_role(out, x, w, y);
  std::vector<double> acc(static_cast<size_t>(os.span_elements()), 0.0);

  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  const SpatialDims o = p.output();
  int64_t od[3] = {1, 1, 1}, fd[3] = {1, 1, 1}, id[3] = {1, 1, 1};
  for (int d = 0; d < p.spatial_dims; ++d) {
    od[d] = o[d];
    fd[d] = p.filter[d];
    id[d] = p.input[d];
  }
  int64_t opos[3], fpos[3], ipos[3];
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t g = 0; g < p.groups; ++g)
      for (int64_t kk = 0; kk < kg; ++kk) {
        const int64_t kc = g * kg + kk;
        for (opos[0] = 0; opos[0] < od[0]; ++opos[0])
          for (opos[1] = 0; opos[1] < od[1]; ++opos[1])
            for (opos[2] = 0; opos[2] < od[2]; ++opos[2]) {
              const int64_t y_off = yi(n, kc, opos);
              for (fpos[0] = 0; fpos[0] < fd[0]; ++fpos[0])
                for (fpos[1] = 0; fpos[1] < fd[1]; ++fpos[1])
                  for (fpos[2] = 0; fpos[2] < fd[2]; ++fpos[2]) {
                    bool inside = true;
                    for (int d = 0; d < 3; ++d) {
                      ipos[d] = d < p.spatial_dims ? opos[d] * p.stride[d] - p.pad_before[d] +
                                                         fpos[d] * p.dilation[d]
                                                   : 0;
                      inside = inside && ipos[d] >= 0 && ipos[d] < id[d];
                    }
                    if (!inside) continue;
                    for (int64_t cc = 0; cc < cg; ++cc) {
                      const int64_t x_off = xi(n, g * cg + cc, ipos);
                      const int64_t w_off = wi(kc, cc, fpos);
                      switch (out) {
                        case TensorRole::kY: acc[y_off] += x[x_off] * w[w_off]; break;
                        case TensorRole::kX: acc[x_off] += y[y_off] * w[w_off]; break;
                        case TensorRole::kW: acc[w_off] += x[x_off] * y[y_off]; break;
                      }
                    }
                  }
            }
      }

  // Write alpha * acc + beta * old into every element of the output (not the strided gaps).
  int64_t idx[kMaxTensorRank] = {0, 0, 0, 0, 0};
  const Indexer oi = indexer(os);
  const int64_t total = os.elements();
  for (int64_t e = 0; e < total; ++e) {
    int64_t rem = e;
    for (int d = os.rank - 1; d >= 0; --d) {
      idx[d] = rem % os.dims[d];
      rem /= os.dims[d];
    }
    int64_t sp[3] = {0, 0, 0};
    for (int d = 2; d < os.rank; ++d) sp[d - 2] = idx[d];
    const int64_t off = oi(idx[0], idx[1], sp);
    const double old = p.beta != 0.0 ? p.beta * ov[off] : 0.0;
    ov[off] = p.alpha * acc[off] + old;
    if (!p.post_ops.empty()) {  // forward only: the output is y, idx[1] its channel
      const double b = bias.empty() ? 0.0 : bias[static_cast<size_t>(idx[1] * bias_stride)];
      const double r = residual.empty() ? 0.0 : residual[static_cast<size_t>(off)];
      ov[off] = apply_post_ops(p.post_ops, ov[off], b, r);
    }
  }
  return ok_status();
}

// v rounded to float toward zero, with the lowest bit set when that was inexact ("round to
// odd"): rounding this float to nearest-even fp16 or bf16 gives the same bits as rounding v
// itself, since float keeps more than two bits beyond either.
namespace {
float to_float_round_to_odd(double v) {
  if (std::isnan(v) || std::isinf(v)) return static_cast<float>(v);
  float f = static_cast<float>(v);
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  if (static_cast<double>(f) != v) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits |= 1u;
    std::memcpy(&f, &bits, 4);
  }
  return f;
}
}  // namespace

void to_data_type(DataType t, const double* src, void* dst, int64_t count) {
  switch (t) {
    case DataType::kDouble: std::memcpy(dst, src, static_cast<size_t>(count) * 8); break;
    case DataType::kFloat: {
      auto* d = static_cast<float*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = static_cast<float>(src[i]);
      break;
    }
    case DataType::kHalf: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = float_to_half_bits(to_float_round_to_odd(src[i]));
      break;
    }
    case DataType::kBFloat16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = float_to_bf16_bits(to_float_round_to_odd(src[i]));
      break;
    }
  }
}

void from_data_type(DataType t, const void* src, double* dst, int64_t count) {
  switch (t) {
    case DataType::kDouble: std::memcpy(dst, src, static_cast<size_t>(count) * 8); break;
    case DataType::kFloat: {
      const auto* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = s[i];
      break;
    }
    case DataType::kHalf: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = half_bits_to_float(s[i]);
      break;
    }
    case DataType::kBFloat16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = bf16_bits_to_float(s[i]);
      break;
    }
  }
}

double relative_l2_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  if (std::isnan(num)) return std::numeric_limits<double>::infinity();
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

double relative_error_tolerance(const ConvProblem& p, NoteSet notes) {
  switch (p.data_type) {
    case DataType::kDouble: return 1e-12;
    case DataType::kHalf:
    case DataType::kBFloat16: return 1e-2;
    case DataType::kFloat:
      return (notes & (kNoteTensorCore | kNoteDownConvertInputs)) != 0 ? 5e-3 : 1e-5;
  }
  return 0;
}

}  // namespace convplan

namespace convplan {
namespace {

// Reads element `off` of a host buffer of type t.
double load(DataType t, const void* base, int64_t off) {
  double v;
  const char* p = static_cast<const char*>(base) + off * size_of(t);
  from_data_type(t, p, &v, 1);
  return v;
}

// Logical index (d0..d4) of offset `off` in shape s; false when off is in a strided gap.
bool unravel(const TensorShape& s, int64_t off, int64_t* idx) {
  // Visit dims from the largest stride down.
  int order[kMaxTensorRank];
  for (int d = 0; d < s.rank; ++d) order[d] = d;
  for (int i = 0; i < s.rank; ++i)
    for (int j = i + 1; j < s.rank; ++j)
      if (s.strides[order[j]] > s.strides[order[i]]) std::swap(order[i], order[j]);
  int64_t rem = off;
  for (int i = 0; i < s.rank; ++i) {
    const int d = order[i];
    if (s.dims[d] == 1) {  // any stride: its index is 0 (and it may tie with a real dimension)
      idx[d] = 0;
      continue;
    }
    idx[d] = rem / s.strides[d];
    rem -= idx[d] * s.strides[d];
    if (idx[d] >= s.dims[d]) return false;
  }
  return rem == 0;
}

}  // namespace

namespace {

// The sampled reference over any source of input values: lx(offset), lw(offset) and ly(offset)
// give the element at that offset of x, w and y (the output's old value, read only for beta);
// post holds the bias and residual of a chain (in the problem's data type).
template <typename LX, typename LW, typename LY>
Status reference_at(const ConvProblem& p, LX lx, LW lw, LY ly, PostOpTensors post,
                    const std::vector<int64_t>& offsets, std::vector<double>& out) {
  CONVPLAN_RETURN_IF_ERROR(p.validate());
  for (auto [kind, tensor, name] : {std::tuple{PostOpKind::kBias, post.bias, "bias"},
                                    std::tuple{PostOpKind::kAdd, post.residual, "residual"}}) {
    if (p.post_ops.has(kind) && tensor == nullptr) {
      return invalid_argument("post_ops=" + p.post_ops.to_string() + " needs the " + name +
                              " tensor, which is null");
    }
  }
  const int64_t bias_stride = p.bias_shape().strides[1];
  const TensorShape xs = p.x_shape(), ws = p.w_shape(), ys = p.y_shape();
  const Indexer xi = indexer(xs), wi = indexer(ws), yi = indexer(ys);
  const DataType t = p.data_type;
  const TensorRole which = p.output_tensor();
  const TensorShape& os = by_role(which, xs, ws, ys);
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  const SpatialDims o = p.output();
  const int sd = p.spatial_dims;
  int64_t od[3] = {1, 1, 1}, fd[3] = {1, 1, 1}, id[3] = {1, 1, 1};
  for (int d = 0; d < sd; ++d) {
    od[d] = o[d];
    fd[d] = p.filter[d];
    id[d] = p.input[d];
  }
  out.assign(offsets.size(), 0.0);
  for (size_t e = 0; e < offsets.size(); ++e) {
    int64_t idx[kMaxTensorRank] = {0, 0, 0, 0, 0};
    if (offsets[e] < 0 || offsets[e] >= os.span_elements() || !unravel(os, offsets[e], idx)) {
      return invalid_argument("offset " + std::to_string(offsets[e]) + " is not an element of " +
                              to_string(which));
    }
    const int64_t* sp = idx + 2;
    double acc = 0;
    int64_t f[3], q[3], i[3];
    if (which == TensorRole::kY) {  // y[n, kc, o] = sum x[n, g*cg+cc, o*s-p+f*d] w[kc, cc, f]
      const int64_t n = idx[0], kc = idx[1], g = kc / kg;
      for (f[0] = 0; f[0] < fd[0]; ++f[0])
        for (f[1] = 0; f[1] < fd[1]; ++f[1])
          for (f[2] = 0; f[2] < fd[2]; ++f[2]) {
            bool inside = true;
            for (int d = 0; d < 3; ++d) {
              i[d] = d < sd ? sp[d] * p.stride[d] - p.pad_before[d] + f[d] * p.dilation[d] : 0;
              inside = inside && i[d] >= 0 && i[d] < id[d];
            }
            if (!inside) continue;
            for (int64_t cc = 0; cc < cg; ++cc)
              acc += lx(xi(n, g * cg + cc, i)) * lw(wi(kc, cc, f));
          }
    } else if (which == TensorRole::kX) {  // dx[n, c, i] = sum over f, kk with o*s = i+p-f*d
      const int64_t n = idx[0], ch = idx[1], g = ch / cg, cc = ch % cg;
      for (f[0] = 0; f[0] < fd[0]; ++f[0])
        for (f[1] = 0; f[1] < fd[1]; ++f[1])
          for (f[2] = 0; f[2] < fd[2]; ++f[2]) {
            bool inside = true;
            for (int d = 0; d < 3; ++d) {
              if (d >= sd) {
                q[d] = 0;
                continue;
              }
              const int64_t num = sp[d] + p.pad_before[d] - f[d] * p.dilation[d];
              inside = inside && num >= 0 && num % p.stride[d] == 0 && num / p.stride[d] < od[d];
              q[d] = num / p.stride[d];
            }
            if (!inside) continue;
            for (int64_t kk = 0; kk < kg; ++kk) {
              const int64_t kc = g * kg + kk;
              acc += ly(yi(n, kc, q)) * lw(wi(kc, cc, f));
            }
          }
    } else {  // dw[kc, cc, f] = sum over n, o of x[n, g*cg+cc, o*s-p+f*d] dy[n, kc, o]
      const int64_t kc = idx[0], cc = idx[1], g = kc / kg;
      const int64_t* fp = sp;
      for (int64_t n = 0; n < p.n; ++n)
        for (q[0] = 0; q[0] < od[0]; ++q[0])
          for (q[1] = 0; q[1] < od[1]; ++q[1])
            for (q[2] = 0; q[2] < od[2]; ++q[2]) {
              bool inside = true;
              for (int d = 0; d < 3; ++d) {
                i[d] = d < sd ? q[d] * p.stride[d] - p.pad_before[d] + fp[d] * p.dilation[d] : 0;
                inside = inside && i[d] >= 0 && i[d] < id[d];
              }
              if (!inside) continue;
              acc += lx(xi(n, g * cg + cc, i)) * ly(yi(n, kc, q));
            }
    }
    const int64_t at = offsets[e];
    const double old = p.beta == 0.0             ? 0.0
                       : which == TensorRole::kX ? p.beta * lx(at)
                       : which == TensorRole::kW ? p.beta * lw(at)
                                                 : p.beta * ly(at);
    out[e] = p.alpha * acc + old;
    if (!p.post_ops.empty()) {  // forward only: idx[1] is the channel
      const double b = post.bias != nullptr ? load(t, post.bias, idx[1] * bias_stride) : 0.0;
      const double r = post.residual != nullptr ? load(t, post.residual, offsets[e]) : 0.0;
      out[e] = apply_post_ops(p.post_ops, out[e], b, r);
    }
  }
  return ok_status();
}

}  // namespace

Status reference_convolution_at(const ConvProblem& p, const void* x, const void* w, const void* y,
                                const std::vector<int64_t>& offsets, std::vector<double>& out) {
  return reference_convolution_at(p, x, w, y, PostOpTensors{}, offsets, out);
}

Status reference_convolution_at(const ConvProblem& p, const void* x, const void* w, const void* y,
                                PostOpTensors post, const std::vector<int64_t>& offsets,
                                std::vector<double>& out) {
  const DataType t = p.data_type;
  return reference_at(
      p, [&](int64_t off) { return load(t, x, off); }, [&](int64_t off) { return load(t, w, off); },
      [&](int64_t off) { return load(t, y, off); }, post, offsets, out);
}

double hashed_input_value(uint64_t seed, int64_t offset) {
  return detail::hashed_value(seed, offset);
}

Status reference_convolution_at_hashed(const ConvProblem& p, const HashedInputs& seeds,
                                       const std::vector<int64_t>& offsets,
                                       std::vector<double>& out) {
  auto from = [](uint64_t seed) {
    return [seed](int64_t off) { return detail::hashed_value(seed, off); };
  };
  return reference_at(p, from(seeds.x), from(seeds.w), from(seeds.y), PostOpTensors{}, offsets,
                      out);
}

}  // namespace convplan
