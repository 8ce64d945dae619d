// ConvProblem: one convolution problem (direction, geometry, types, layout, scaling), and
// TransposedConvProblem, which maps a deconvolution onto the three ConvProblem directions.
//
// A plain value type: copy it freely, compare it, hash it, print and parse it. It knows nothing
// of cuDNN or CUDA. Thread-compatible (const methods are safe from several threads).
//
// Tensors, always described in logical order (N, C, spatial...) whatever the memory layout:
//   x: (n, c, input...)            the convolution's input   (dx for backward-data)
//   w: (k, c / groups, filter...)  the filter                (dw for backward-filter)
//   y: (n, k, output()...)         the convolution's output  (dy for the backward directions)
// The direction says which of the three is written:
//   kForward       y = alpha * conv(x, w)           + beta * y
//   kBackwardData  x = alpha * conv_bwd_data(y, w)  + beta * x
//   kBackwardFilter w = alpha * conv_bwd_filter(x, y) + beta * w
// conv is cross-correlation (no filter flip), as in cuDNN's CUDNN_CROSS_CORRELATION mode.
//
// Forward problems may carry a post-operation chain (post_ops, text "post:bias+add+relu"), applied
// in order to every output element after the convolution (beta must then be 0):
//   y = op_n(...op_1(alpha * conv(x, w)))
// with bias: v + bias[k] (a tensor of k values, bias_shape()), add: v + scale * residual (a tensor
// of y's shape and strides, residual_shape()), and the activations relu, relu6 (min(max(v,0),6)),
// gelu (erf form), gelu_tanh (tanh approximation), silu (v * sigmoid(v)), sigmoid, tanh, elu
// (alpha 1: v > 0 ? v : exp(v) - 1). The backward directions take no chain (validate() says so):
// a chain's gradient is the framework's business, not one convolution's.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "convplan/export.h"
#include "convplan/status.h"

namespace convplan {

enum class Direction { kForward, kBackwardData, kBackwardFilter };
enum class DataType { kFloat, kHalf, kBFloat16, kDouble };
// kChannelsFirst: NCHW-style packed; kChannelsLast: NHWC-style packed (filters KRSC);
// kExplicit: the strides in x_strides, w_strides and y_strides (elements, logical order).
enum class Layout { kChannelsFirst, kChannelsLast, kExplicit };
// The three logical tensors (see above). The values are the tensors' order wherever the three
// are listed together (TensorPointers, reference_convolution's arguments): x, w, y.
enum class TensorRole { kX = 0, kW = 1, kY = 2 };
// The three roles in that order, for loops over the tensors.
inline constexpr TensorRole kTensorRoles[] = {TensorRole::kX, TensorRole::kW, TensorRole::kY};

inline constexpr int kMaxSpatialDims = 3;
inline constexpr int kMaxTensorRank = kMaxSpatialDims + 2;
// Per-spatial-dimension values; entries past spatial_dims are ignored by every method and are
// kept at their defaults (1 for sizes, strides and dilations, 0 for padding) so that == and
// hash() see equal problems as equal.
using SpatialDims = std::array<int64_t, kMaxSpatialDims>;
using TensorStrides = std::array<int64_t, kMaxTensorRank>;

// Name used in text forms and messages: "fwd", "bwd_data", "bwd_filter"; "f32", "f16", "bf16",
// "f64"; "nchw" (channels-first), "nhwc" (channels-last), "explicit".
CONVPLAN_EXPORT const char* to_string(Direction d);
CONVPLAN_EXPORT const char* to_string(DataType t);
CONVPLAN_EXPORT const char* to_string(Layout l);
CONVPLAN_EXPORT const char* to_string(TensorRole r);  // "x", "w", "y"
// The one of (x, w, y) that `role` names, e.g. by_role(p.output_tensor(), dx, dw, dy).
template <typename T>
T& by_role(TensorRole role, T& x, T& w, T& y) {
  return role == TensorRole::kX ? x : role == TensorRole::kW ? w : y;
}
CONVPLAN_EXPORT StatusOr<Direction> parse_direction(std::string_view s);
CONVPLAN_EXPORT StatusOr<DataType> parse_data_type(std::string_view s);
CONVPLAN_EXPORT StatusOr<Layout> parse_layout(std::string_view s);
CONVPLAN_EXPORT int64_t size_of(DataType t);  // bytes per element
// fp64 for fp64 data, fp32 otherwise.
CONVPLAN_EXPORT DataType default_compute_type(DataType data_type);

// Dimensions and element strides of one tensor in logical order (N, C, spatial...).
struct CONVPLAN_EXPORT TensorShape {
  int rank = 0;  // spatial_dims + 2
  TensorStrides dims{};
  TensorStrides strides{};
  int64_t elements() const;       // product of dims
  int64_t span_elements() const;  // 1 + largest offset: the elements a buffer must hold
  bool operator==(const TensorShape&) const = default;
};

// One step of a post-operation chain. scale is used by kAdd only (and is 1 for every other kind).
enum class PostOpKind {
  kBias,
  kAdd,
  kRelu,
  kRelu6,
  kGelu,
  kGeluTanh,
  kSilu,
  kSigmoid,
  kTanh,
  kElu
};
inline constexpr int kPostOpKinds = 10;
// "bias", "add", "relu", "relu6", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "elu".
CONVPLAN_EXPORT const char* to_string(PostOpKind k);

struct CONVPLAN_EXPORT PostOp {
  PostOpKind kind = PostOpKind::kRelu;
  double scale = 1.0;
  bool operator==(const PostOp&) const = default;
};

inline constexpr int kMaxPostOps = 8;

// A post-operation chain: the first `count` entries of ops, in order (entries past count are
// ignored by ==). At most one bias and one add (there is one tensor of each).
struct CONVPLAN_EXPORT PostOps {
  std::array<PostOp, kMaxPostOps> ops{};
  int count = 0;

  bool empty() const { return count == 0; }
  bool has(PostOpKind k) const;
  // The chain's text: ops joined by '+', an add with scale != 1 as "add*S" (S the shortest
  // decimal of the scale): "bias+add*0.5+relu". "" for the empty chain.
  std::string to_string() const;
  // Parses that text; kInvalidArgument naming the token ("'rleu' at 5 is not a post-op (bias,
  // add, ...)"), an empty token, a repeated bias or add, a bad scale or more than kMaxPostOps.
  static StatusOr<PostOps> parse(std::string_view text);
  // Appends one op (no checks; validate() checks).
  void push(PostOpKind kind, double scale = 1.0);
  bool operator==(const PostOps& other) const;
};

struct CONVPLAN_EXPORT ConvProblem {
  Direction direction = Direction::kForward;
  int spatial_dims = 2;  // 1, 2 or 3
  int64_t n = 1;
  int64_t c = 1;  // input channels (all groups)
  int64_t k = 1;  // output channels (all groups)
  int64_t groups = 1;
  SpatialDims input{1, 1, 1};
  SpatialDims filter{1, 1, 1};
  SpatialDims pad_before{0, 0, 0};
  SpatialDims pad_after{0, 0, 0};
  SpatialDims stride{1, 1, 1};
  SpatialDims dilation{1, 1, 1};
  DataType data_type = DataType::kFloat;
  DataType compute_type = DataType::kFloat;  // see default_compute_type()
  // Tensor-core math; for fp32 data that means TF32. Half types always use tensor cores where
  // the engine has them, so the flag matters for fp32 (and is kept true for the others).
  bool allow_tensor_cores = true;
  Layout layout = Layout::kChannelsFirst;
  TensorStrides x_strides{};  // only with Layout::kExplicit; zeros otherwise
  TensorStrides w_strides{};
  TensorStrides y_strides{};
  double alpha = 1.0;
  double beta = 0.0;
  PostOps post_ops;  // forward only; see the top of this file

  // A problem with data_type and compute_type both set: compute = default_compute_type(t).
  static ConvProblem with_data_type(ConvProblem p, DataType t);

  // REQUIRES for everything below but validate(): validate().ok().
  // Output spatial size: (input + pad_before + pad_after - dilation*(filter-1) - 1)/stride + 1.
  SpatialDims output() const;
  TensorShape x_shape() const;
  TensorShape w_shape() const;
  TensorShape y_shape() const;
  // The tensors of a post-op chain: bias (1, k, 1...) packed (channels-last strides for
  // Layout::kChannelsLast, channels-first otherwise: k contiguous values either way); residual
  // of y's dims and strides.
  TensorShape bias_shape() const;
  TensorShape residual_shape() const { return y_shape(); }
  // This problem without its chain: the convolution an unfused plan runs before the epilogue.
  ConvProblem without_post_ops() const;
  // Which logical tensor the direction writes.
  TensorRole output_tensor() const;
  // The shape of `role`'s tensor: x_shape(), w_shape() or y_shape().
  TensorShape shape_of(TensorRole role) const;
  // Multiply-adds times two, as for the forward direction (the same count for all three).
  double flops() const;
  // Each tensor read once and the output written once (read too when beta != 0), in bytes; a
  // chain's bias and residual read once.
  double min_bytes() const;

  // Every impossible problem gets kInvalidArgument naming the field and the value, e.g.
  // "groups=3 does not divide c=64", "dilation[1]=0 must be >= 1", "output[0]=0 is empty".
  Status validate() const;

  // The canonical text form (see parse_problem). parse_problem(p.to_string()) == p.
  std::string to_string() const;
  // Stable across processes and builds (FNV-1a over the canonical fields), never std::hash.
  uint64_t hash() const;
  bool operator==(const ConvProblem&) const = default;
};

// Parses the text form, which follows oneDNN benchdnn's convolution descriptor:
//   [dir:DIR,dt:TYPE,ct:TYPE,layout:LAYOUT,tc:0|1,alpha:A,beta:B,xs:S,ws:S,ys:S,post:CHAIN/]g1mb32ic64ih56iw56oc64oh56ow56kh3kw3sh1sw1ph1pw1
// The optional prefix before '/' holds comma-separated key:value flags; the descriptor after it
// uses benchdnn's letters (g mb ic id ih iw oc od oh ow kd kh kw sd sh sw dd dh dw pd ph pw) with
// rd/rh/rw for asymmetric padding after (pd/ph/pw then mean before), benchdnn's dilation
// convention (dh0 = no dilation) and its defaults. Spatial rank is taken from the letters given.
// Errors name the offending part and its position: "at 12 ('kh0'): kh must be >= 1".
CONVPLAN_EXPORT StatusOr<ConvProblem> parse_problem(std::string_view text);

// Which pass of a transposed convolution (deconvolution) to run.
enum class TransposedPass {
  kForward,         // y = deconv(x, w)
  kBackwardData,    // dx from dy
  kBackwardFilter,  // dw from x and dy
};

// A transposed convolution as users think of it (PyTorch's ConvTranspose): input x of
// (n, c, input...), weight w of (c, k / groups, filter...), output of (n, k, output()...) with
// output = (input-1)*stride - pad_before - pad_after + dilation*(filter-1) + output_padding + 1.
struct CONVPLAN_EXPORT TransposedConvProblem {
  int spatial_dims = 2;
  int64_t n = 1;
  int64_t c = 1;  // the deconvolution's input channels
  int64_t k = 1;  // its output channels
  int64_t groups = 1;
  SpatialDims input{1, 1, 1};
  SpatialDims filter{1, 1, 1};
  SpatialDims pad_before{0, 0, 0};
  SpatialDims pad_after{0, 0, 0};
  SpatialDims stride{1, 1, 1};
  SpatialDims dilation{1, 1, 1};
  SpatialDims output_padding{0, 0, 0};  // each < stride or < dilation
  DataType data_type = DataType::kFloat;
  DataType compute_type = DataType::kFloat;
  bool allow_tensor_cores = true;
  Layout layout = Layout::kChannelsFirst;  // kExplicit is not offered here
  double alpha = 1.0;
  double beta = 0.0;

  SpatialDims output() const;
  Status validate() const;
  bool operator==(const TransposedConvProblem&) const = default;

  // The ordinary convolution that computes `pass`, and how the tensors map onto it:
  //   kForward:        kBackwardData  of conv(x := deconv output, w, y := deconv input)
  //   kBackwardData:   kForward       with conv x := d(deconv output), y := d(deconv input)
  //   kBackwardFilter: kBackwardFilter with conv x := d(deconv output), y := deconv input
  // i.e. the conv's x is always the deconvolution's output side, its y the input side, and the
  // filter is shared unchanged ((c, k/groups, ...) is the conv's (K, C/groups, ...)).
  StatusOr<ConvProblem> to_conv(TransposedPass pass) const;
};

}  // namespace convplan
