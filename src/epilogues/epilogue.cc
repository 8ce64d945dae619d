// The epilogue's parameters, its launch, and the host twin of the kernel.
#include "epilogues/epilogue.h"

#include <cstring>
#include <string>

#include "convplan/reference.h"
#include "epilogues/epilogue_kernels.h"

namespace convplan::epilogue_detail {
namespace {

static_assert(kEpilogueMaxOps == kMaxPostOps);
static_assert(kEpilogueMaxRank == kMaxTensorRank);
static_assert(static_cast<int>(PostOpKind::kElu) == kOpElu && kPostOpKinds == kOpElu + 1);

// Host storage of one element: its bits, converted through the reference's conversions (fp16
// and bf16 round to nearest even, as the kernel's __float2half_rn / __float2bfloat16_rn).
template <typename Bits, DataType kType, typename Compute, int kVectorElements>
struct HostTraits {
  struct T {
    Bits bits;
  };
  using C = Compute;
  static constexpr int kVector = kVectorElements;
  static C to_c(T v) {
    double d = 0;
    from_data_type(kType, &v.bits, &d, 1);
    return static_cast<C>(d);
  }
  static T from_c(C v) {
    const double d = static_cast<double>(v);  // exact: float widens without rounding
    T out{};
    to_data_type(kType, &d, &out.bits, 1);
    return out;
  }
  static void load_vector(const T* s, T* d) { std::memcpy(d, s, 16); }
  static void store_vector(T* d, const T* s) { std::memcpy(d, s, 16); }
};

using HostF32 = HostTraits<float, DataType::kFloat, float, 4>;
using HostF64 = HostTraits<double, DataType::kDouble, double, 2>;
using HostF16 = HostTraits<uint16_t, DataType::kHalf, float, 8>;
using HostBF16 = HostTraits<uint16_t, DataType::kBFloat16, float, 8>;

template <typename Traits>
void run_host(const EpilogueParams& p, bool vectorized, void* y_raw, const void* bias_raw,
              const void* residual_raw) {
  using T = typename Traits::T;
  auto* y = static_cast<T*>(y_raw);
  const auto* bias = epilogue_has(p, kOpBias) ? static_cast<const T*>(bias_raw) : nullptr;
  const auto* residual = epilogue_has(p, kOpAdd) ? static_cast<const T*>(residual_raw) : nullptr;
  if (!p.packed || !vectorized) {
    int64_t elements = 1;
    for (int d = 0; d < p.rank; ++d) elements *= p.dims[d];
    for (int64_t e = 0; e < elements; ++e)
      epilogue_strided_element<Traits>(p, e, y, bias, residual);
    return;
  }
  constexpr int V = Traits::kVector;
  const int64_t vectors = p.elements / V;
  for (int64_t v = 0; v < vectors; ++v) {
    epilogue_packed_span<Traits, int64_t>(p, v * V, V, y, bias, residual);
  }
  const int tail = static_cast<int>(p.elements % V);
  if (tail > 0) epilogue_packed_span<Traits, int64_t>(p, vectors * V, tail, y, bias, residual);
}

EpilogueType epilogue_type(DataType t) {
  switch (t) {
    case DataType::kFloat: return EpilogueType::kFloat;
    case DataType::kHalf: return EpilogueType::kHalf;
    case DataType::kBFloat16: return EpilogueType::kBFloat16;
    case DataType::kDouble: return EpilogueType::kDouble;
  }
  return EpilogueType::kFloat;
}

}  // namespace

EpilogueParams epilogue_params(const ConvProblem& problem) {
  EpilogueParams p;
  const PostOps& chain = problem.post_ops;
  p.op_count = chain.count;
  for (int i = 0; i < chain.count && i < kMaxPostOps; ++i) {
    const PostOp& op = chain.ops[static_cast<size_t>(i)];
    p.ops[i] = static_cast<uint8_t>(op.kind);
    if (op.kind == PostOpKind::kAdd) p.add_scale = op.scale;
  }
  const TensorShape y = problem.y_shape();
  p.rank = y.rank;
  for (int d = 0; d < y.rank; ++d) {
    p.dims[d] = y.dims[d];
    p.strides[d] = y.strides[d];
  }
  p.packed = problem.layout != Layout::kExplicit;
  p.elements = y.elements();
  p.channels = problem.k;
  int64_t spatial = 1;
  for (int d = 2; d < y.rank; ++d) spatial *= y.dims[d];
  p.channel_stride = problem.layout == Layout::kChannelsLast ? 1 : spatial;
  p.bias_stride = problem.bias_shape().strides[1];
  return p;
}

Status check_epilogue(const ConvProblem& problem, const void* y, const void* bias,
                      const void* residual) {
  CONVPLAN_RETURN_IF_ERROR(problem.validate());
  if (problem.post_ops.empty()) {
    return invalid_argument("the epilogue needs a post-op chain; " + problem.to_string() +
                            " has none");
  }
  if (y == nullptr) return invalid_argument("tensor y is null");
  if (problem.post_ops.has(PostOpKind::kBias) && bias == nullptr) {
    return invalid_argument("tensor bias is null; post:" + problem.post_ops.to_string() +
                            " needs it");
  }
  if (problem.post_ops.has(PostOpKind::kAdd) && residual == nullptr) {
    return invalid_argument("tensor residual is null; post:" + problem.post_ops.to_string() +
                            " needs it");
  }
  return ok_status();
}

Status enqueue_epilogue(cudaStream_t stream, const ConvProblem& problem, void* y, const void* bias,
                        const void* residual, EpilogueKernel kernel) {
  CONVPLAN_RETURN_IF_ERROR(check_epilogue(problem, y, bias, residual));
  const cudaError_t e = enqueue_epilogue(stream, epilogue_type(problem.data_type),
                                         epilogue_params(problem), y, bias, residual, kernel);
  if (e != cudaSuccess) {
    return Status(StatusCode::kCudaError,
                  std::string("epilogue kernel launch: ") + cudaGetErrorString(e));
  }
  return ok_status();
}

EpilogueKernel epilogue_kernel_for(const ConvProblem& problem, EpilogueKernel requested,
                                   const void* y, const void* residual) {
  return select_epilogue_kernel(
      requested, epilogue_params(problem), epilogue_type(problem.data_type),
      reinterpret_cast<uintptr_t>(y),
      problem.post_ops.has(PostOpKind::kAdd) ? reinterpret_cast<uintptr_t>(residual) : 0);
}

Status run_epilogue_on_host(const ConvProblem& problem, void* y, const void* bias,
                            const void* residual, bool vectorized) {
  CONVPLAN_RETURN_IF_ERROR(check_epilogue(problem, y, bias, residual));
  const EpilogueParams p = epilogue_params(problem);
  switch (problem.data_type) {
    case DataType::kFloat: run_host<HostF32>(p, vectorized, y, bias, residual); break;
    case DataType::kHalf: run_host<HostF16>(p, vectorized, y, bias, residual); break;
    case DataType::kBFloat16: run_host<HostBF16>(p, vectorized, y, bias, residual); break;
    case DataType::kDouble: run_host<HostF64>(p, vectorized, y, bias, residual); break;
  }
  return ok_status();
}

}  // namespace convplan::epilogue_detail
