// The epilogue kernel's host twin (the kernel's own per-vector code run serially): every post-op
// and some chains, in every data type and layout, against apply_post_ops in float64; the
// vector/tail split, channel stepping across vectors, and the pointer checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "convplan/problem.h"
#include "convplan/reference.h"
#include "epilogues/epilogue.h"

namespace convplan {
namespace {

using epilogue_detail::run_epilogue_on_host;

// Inputs of one case on the host, in the problem's data type, and the float64 expectation.
struct Case {
  ConvProblem problem;
  std::vector<double> y, bias, residual, expected;
  std::vector<uint8_t> y_bytes, bias_bytes, residual_bytes;
};

double value(uint64_t seed, int64_t i) {  // deterministic, exact in bf16: multiples of 1/32
  uint64_t z = (seed + static_cast<uint64_t>(i)) * 0x9E3779B97F4A7C15ull;
  z ^= z >> 29;
  return (static_cast<double>(z % 257) - 128.0) / 32.0;
}

std::vector<uint8_t> to_bytes(DataType t, const std::vector<double>& v) {
  std::vector<uint8_t> out(v.size() * static_cast<size_t>(size_of(t)));
  to_data_type(t, v.data(), out.data(), static_cast<int64_t>(v.size()));
  return out;
}

std::vector<double> from_bytes(DataType t, const std::vector<uint8_t>& b) {
  std::vector<double> out(b.size() / static_cast<size_t>(size_of(t)));
  from_data_type(t, b.data(), out.data(), static_cast<int64_t>(out.size()));
  return out;
}

// Every element offset of a shape, in logical order.
std::vector<int64_t> element_offsets(const TensorShape& s) {
  std::vector<int64_t> out;
  int64_t idx[kMaxTensorRank] = {0, 0, 0, 0, 0};
  const int64_t n = s.elements();
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e, off = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      idx[d] = rest % s.dims[d];
      rest /= s.dims[d];
      off += idx[d] * s.strides[d];
    }
    out.push_back(off);
  }
  return out;
}

Case make_case(const std::string& text) {
  Case c;
  StatusOr<ConvProblem> p = parse_problem(text);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status().to_string();
  c.problem = *p;
  const DataType t = c.problem.data_type;
  const TensorShape ys = c.problem.y_shape();
  c.y.resize(static_cast<size_t>(ys.span_elements()));
  for (size_t i = 0; i < c.y.size(); ++i) c.y[i] = value(1, static_cast<int64_t>(i));
  c.bias.resize(static_cast<size_t>(c.problem.bias_shape().span_elements()));
  for (size_t i = 0; i < c.bias.size(); ++i) c.bias[i] = value(2, static_cast<int64_t>(i)) / 4;
  c.residual.resize(c.y.size());
  for (size_t i = 0; i < c.residual.size(); ++i) c.residual[i] = value(3, static_cast<int64_t>(i));
  c.y_bytes = to_bytes(t, c.y);
  c.bias_bytes = to_bytes(t, c.bias);
  c.residual_bytes = to_bytes(t, c.residual);
  // The expectation from the values as stored (they are exact in every type) and the gaps
  // of a strided layout left as they were.
  c.expected = c.y;
  const int64_t bias_stride = c.problem.bias_shape().strides[1];
  const std::vector<int64_t> offsets = element_offsets(ys);
  for (size_t e = 0; e < offsets.size(); ++e) {
    int64_t rest = static_cast<int64_t>(e), channel = 0;
    for (int d = ys.rank - 1; d >= 0; --d) {
      if (d == 1) channel = rest % ys.dims[d];
      rest /= ys.dims[d];
    }
    const size_t off = static_cast<size_t>(offsets[e]);
    c.expected[off] =
        apply_post_ops(c.problem.post_ops, c.y[off],
                       c.bias[static_cast<size_t>(channel * bias_stride)], c.residual[off]);
  }
  return c;
}

// Relative L2 error over the tensor's elements (gaps must be untouched, checked apart).
double run_and_compare(Case& c, bool vectorized) {
  std::vector<uint8_t> y = c.y_bytes;
  const Status s = run_epilogue_on_host(c.problem, y.data(), c.bias_bytes.data(),
                                        c.residual_bytes.data(), vectorized);
  EXPECT_TRUE(s.ok()) << s.to_string();
  const std::vector<double> got = from_bytes(c.problem.data_type, y);
  const std::vector<int64_t> offsets = element_offsets(c.problem.y_shape());
  std::vector<double> a, b;
  for (int64_t off : offsets) {
    a.push_back(got[static_cast<size_t>(off)]);
    b.push_back(c.expected[static_cast<size_t>(off)]);
  }
  std::vector<bool> element(got.size(), false);
  for (int64_t off : offsets) element[static_cast<size_t>(off)] = true;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!element[i]) {
      EXPECT_EQ(got[i], c.y[i]) << "a strided gap at " << i << " was written";
    }
  }
  return relative_l2_error(a, b);
}

// Rounding the result to the type (and fp16/bf16 keeping the conv's value in fp32 inside).
double tolerance(DataType t) {
  switch (t) {
    case DataType::kDouble: return 1e-13;
    case DataType::kFloat: return 1e-6;
    case DataType::kHalf: return 1e-3;
    case DataType::kBFloat16: return 8e-3;
  }
  return 0;
}

// Odd sizes: 2*5*3*3 = 90 elements, not a multiple of any vector width, and k = 5 so vectors
// straddle channels in every layout.
constexpr const char* kOdd = "g1mb2ic3ih3iw3oc5oh3ow3kh1kw1sh1sw1ph0pw0";

TEST(EpilogueHostTwin, EveryOpEveryTypeEveryLayout) {
  const char* layouts[] = {"nchw", "nhwc"};
  for (int k = 0; k < kPostOpKinds; ++k) {
    const std::string op = to_string(static_cast<PostOpKind>(k));
    for (const char* dt : {"f32", "f16", "bf16", "f64"}) {
      for (const char* layout : layouts) {
        Case c =
            make_case(std::string("dt:") + dt + ",layout:" + layout + ",post:" + op + "/" + kOdd);
        for (bool vectorized : {true, false}) {
          const double err = run_and_compare(c, vectorized);
          EXPECT_LT(err, tolerance(c.problem.data_type))
              << op << " " << dt << " " << layout << " vectorized=" << vectorized;
        }
      }
    }
  }
}

TEST(EpilogueHostTwin, ChainsInOrderWithScaledResidual) {
  for (const char* chain : {"bias+relu", "bias+add+relu", "add*0.5+bias+relu6", "bias+add*-2+gelu",
                            "bias+silu+add", "tanh+bias+sigmoid+add*0.25+elu+gelu_tanh"}) {
    for (const char* dt : {"f32", "bf16", "f64"}) {
      Case c = make_case(std::string("dt:") + dt + ",layout:nhwc,post:" + chain + "/" + kOdd);
      EXPECT_LT(run_and_compare(c, true), tolerance(c.problem.data_type)) << chain << " " << dt;
    }
  }
}

// The host twin on y in a buffer with 16 bytes of slack after it, returned without the slack,
// which must come back as it was: a partial last vector's elements past the output are computed
// but never stored.
std::vector<uint8_t> run_with_slack(const Case& c, bool vectorized) {
  std::vector<uint8_t> y = c.y_bytes;
  y.insert(y.end(), 16, 0xA5);
  const Status s = run_epilogue_on_host(c.problem, y.data(), c.bias_bytes.data(),
                                        c.residual_bytes.data(), vectorized);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(std::vector<uint8_t>(y.end() - 16, y.end()), std::vector<uint8_t>(16, 0xA5))
      << c.problem.to_string() << ": written past the output";
  y.resize(c.y_bytes.size());
  return y;
}

// Two chains that hold every op between them, in orders no fixed kernel has (bias and add after
// activations, activations repeated), through the packed path's op-by-op interpretation of whole
// vectors: every type, both packed layouts, K and planes that are not multiples of any vector, a
// partial last vector. Its bytes must be the element-wise path's (which interprets the chain per
// element: both apply the same apply_epilogue_op to each element).
TEST(EpilogueHostTwin, LongChainsOfEveryOpMatchTheElementWisePathByteForByte) {
  const char* chains[] = {"gelu+bias+relu6+add*-0.75+gelu_tanh+silu+sigmoid+tanh",
                          "elu+relu+add*1.5+bias+gelu+elu"};
  const char* convs[] = {kOdd, "g1mb3ic4ih5iw7oc37oh5ow7kh1kw1", "g1mb1ic2iw11oc3kw1"};
  for (const char* chain : chains) {
    for (const char* dt : {"f32", "f16", "bf16", "f64"}) {
      for (const char* layout : {"nchw", "nhwc"}) {
        for (const char* conv : convs) {
          const std::string text =
              std::string("dt:") + dt + ",layout:" + layout + ",post:" + chain + "/" + conv;
          Case c = make_case(text);
          EXPECT_EQ(run_with_slack(c, true), run_with_slack(c, false)) << text;
          EXPECT_LT(run_and_compare(c, true), tolerance(c.problem.data_type)) << text;
        }
      }
    }
  }
}

// Explicit strides take the element-wise path; the gaps stay as they were (checked inside).
TEST(EpilogueHostTwin, ExplicitStridesLeaveGapsAlone) {
  const std::string text =
      "dt:f32,xs:200x50x10x2,ws:3x1x3x1,ys:400x70x20x3,post:bias+add+silu/"
      "g1mb2ic3ih3iw3oc5oh3ow3kh1kw1sh1sw1ph0pw0";
  Case c = make_case(text);
  EXPECT_LT(run_and_compare(c, true), 1e-6);
}

// Many channels and a 3-D and a 1-D problem: the channel stepping across vector boundaries.
TEST(EpilogueHostTwin, ChannelSteppingOnLargerShapes) {
  for (const char* text : {"dt:bf16,layout:nhwc,post:bias+relu/g1mb3ic4ih5iw7oc37oh5ow7kh1kw1",
                           "dt:f16,post:bias+add+relu/g1mb3ic4ih5iw7oc37oh5ow7kh1kw1",
                           "dt:f32,post:bias+gelu/g1mb2ic2id3ih3iw5oc7kd1kh1kw1",
                           "dt:f32,layout:nhwc,post:bias+elu/g1mb2ic2iw13oc9kw1"}) {
    Case c = make_case(text);
    EXPECT_LT(run_and_compare(c, true), tolerance(c.problem.data_type)) << text;
  }
}

// Bias values are read per channel: a chain of bias alone must give y + bias[channel] exactly
// (f64), which fails if the channel of any element is wrong.
TEST(EpilogueHostTwin, BiasLandsOnTheRightChannelExactly) {
  for (const char* layout : {"nchw", "nhwc"}) {
    Case c = make_case(std::string("dt:f64,layout:") + layout +
                       ",post:bias/g1mb2ic3ih3iw3oc5oh3ow3kh1kw1");
    std::vector<uint8_t> y = c.y_bytes;
    ASSERT_TRUE(run_epilogue_on_host(c.problem, y.data(), c.bias_bytes.data(), nullptr).ok());
    EXPECT_EQ(from_bytes(DataType::kDouble, y), c.expected) << layout;
  }
}

TEST(EpilogueHostTwin, MissingTensorsAreNamed) {
  Case c = make_case(std::string("post:bias+add+relu/") + kOdd);
  std::vector<uint8_t> y = c.y_bytes;
  Status s = run_epilogue_on_host(c.problem, y.data(), nullptr, c.residual_bytes.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor bias is null"), std::string::npos) << s.message();
  s = run_epilogue_on_host(c.problem, y.data(), c.bias_bytes.data(), nullptr);
  EXPECT_NE(s.message().find("tensor residual is null"), std::string::npos) << s.message();
  ConvProblem plain = c.problem.without_post_ops();
  s = run_epilogue_on_host(plain, y.data(), nullptr, nullptr);
  EXPECT_NE(s.message().find("needs a post-op chain"), std::string::npos) << s.message();
  EXPECT_EQ(y, c.y_bytes);  // nothing ran
}

TEST(EpilogueParams, PackedLayoutsStepChannelsBySpatialSizeOrOne) {
  const ConvProblem nchw = *parse_problem(std::string("post:relu/") + kOdd);
  const ConvProblem nhwc = *parse_problem(std::string("layout:nhwc,post:relu/") + kOdd);
  EXPECT_EQ(epilogue_detail::epilogue_params(nchw).channel_stride, 9);
  EXPECT_EQ(epilogue_detail::epilogue_params(nhwc).channel_stride, 1);
  EXPECT_EQ(epilogue_detail::epilogue_params(nchw).elements, 90);
  EXPECT_TRUE(epilogue_detail::epilogue_params(nchw).packed);
}

// Fixed-kernel selection (epilogue_math.h): which chains have one, and where the generic kernel
// runs instead. The kernels themselves are compared byte for byte on the GPU
// (FusedGpuTest.FixedEpilogueKernelsMatchTheGenericKernelByteForByte).
namespace ed = epilogue_detail;

ed::EpilogueParams params_of(const std::string& text) {
  StatusOr<ConvProblem> p = parse_problem(text);
  EXPECT_TRUE(p.ok()) << text;
  return p.ok() ? ed::epilogue_params(*p) : ed::EpilogueParams{};
}

TEST(EpilogueKernelSelection, CommonChainsHaveAFixedKernel) {
  const std::pair<const char*, ed::FixedChain> cases[] = {
      {"bias", ed::FixedChain::kBias},
      {"bias+relu", ed::FixedChain::kBiasRelu},
      {"bias+add", ed::FixedChain::kBiasAdd},
      {"bias+add+relu", ed::FixedChain::kBiasAddRelu},
      {"bias+add*0.5+relu", ed::FixedChain::kBiasAddRelu},  // the scale is a parameter
      {"add+relu", ed::FixedChain::kAddRelu},
      {"relu", ed::FixedChain::kRelu},
      {"bias+gelu", ed::FixedChain::kBiasGelu},
      {"bias+silu", ed::FixedChain::kBiasSilu},
  };
  for (const auto& [chain, fixed] : cases) {
    EXPECT_EQ(
        ed::fixed_chain(params_of(std::string("dt:bf16,layout:nhwc,post:") + chain + "/" + kOdd)),
        fixed)
        << chain;
  }
  for (const char* chain : {"relu+bias", "bias+relu6", "bias+add+gelu", "add", "bias+relu+relu",
                            "gelu_tanh", "bias+add+relu+tanh"}) {
    EXPECT_EQ(ed::fixed_chain(params_of(std::string("post:") + chain + "/" + kOdd)),
              ed::FixedChain::kNone)
        << chain;
  }
}

TEST(EpilogueKernelSelection, FallsBackToTheGenericKernel) {
  const auto select = [](const ed::EpilogueParams& p, ed::EpilogueType t, uintptr_t y,
                         uintptr_t residual,
                         ed::EpilogueKernel requested = ed::kDefaultEpilogueKernel) {
    return ed::select_epilogue_kernel(requested, p, t, y, residual);
  };
  constexpr auto kFixed = ed::EpilogueKernel::kFixed, kGeneric = ed::EpilogueKernel::kGeneric;
  EXPECT_EQ(ed::kDefaultEpilogueKernel, kFixed);
  const ed::EpilogueParams p = params_of(std::string("layout:nhwc,post:bias+add+relu/") + kOdd);
  for (auto t : {ed::EpilogueType::kFloat, ed::EpilogueType::kHalf, ed::EpilogueType::kBFloat16})
    EXPECT_EQ(select(p, t, 4096, 8192), kFixed);
  EXPECT_EQ(select(p, ed::EpilogueType::kDouble, 4096, 8192), kGeneric);          // no fp64 kernels
  EXPECT_EQ(select(p, ed::EpilogueType::kHalf, 4096, 8192, kGeneric), kGeneric);  // asked for
  EXPECT_EQ(select(p, ed::EpilogueType::kHalf, 4098, 8192), kGeneric);            // y unaligned
  EXPECT_EQ(select(p, ed::EpilogueType::kHalf, 4096, 8194), kGeneric);  // residual unaligned
  const ed::EpilogueParams no_add = params_of(std::string("layout:nhwc,post:bias+relu/") + kOdd);
  EXPECT_EQ(select(no_add, ed::EpilogueType::kHalf, 4096, 2), kFixed);  // no residual read
  ed::EpilogueParams strided = p;
  strided.packed = false;
  EXPECT_EQ(select(strided, ed::EpilogueType::kHalf, 4096, 8192), kGeneric);
  ed::EpilogueParams huge = p;
  huge.elements = int64_t{1} << 31;  // 32-bit indices only
  EXPECT_EQ(select(huge, ed::EpilogueType::kHalf, 4096, 8192), kGeneric);
  const ed::EpilogueParams other = params_of(std::string("post:bias+add+elu/") + kOdd);
  EXPECT_EQ(select(other, ed::EpilogueType::kHalf, 4096, 8192), kGeneric);
  // Through the problem: the same answer.
  const ConvProblem prob = *parse_problem(std::string("dt:bf16,layout:nhwc,post:relu/") + kOdd);
  alignas(16) static uint16_t buffer[16];
  EXPECT_EQ(ed::epilogue_kernel_for(prob, ed::kDefaultEpilogueKernel, buffer, nullptr), kFixed);
  EXPECT_EQ(ed::epilogue_kernel_for(prob, ed::kDefaultEpilogueKernel, buffer + 1, nullptr),
            kGeneric);
}

TEST(EpilogueKernelSelection, BiasModeFollowsTheLayout) {
  constexpr auto kHalf = ed::EpilogueType::kHalf, kFloat = ed::EpilogueType::kFloat;
  // Channels-last: one 16-byte bias load per vector where K splits into vectors.
  const auto nhwc = [](int k) {
    return params_of("dt:f16,layout:nhwc,post:bias+relu/g1mb2ic4ih5iw5oc" + std::to_string(k) +
                     "kh1kw1");
  };
  EXPECT_EQ(ed::fixed_bias_mode(nhwc(64), kHalf, 4096), ed::FixedBiasMode::kVector);
  EXPECT_EQ(ed::fixed_bias_mode(nhwc(64), kHalf, 4098), ed::FixedBiasMode::kStep);  // unaligned
  EXPECT_EQ(ed::fixed_bias_mode(nhwc(12), kHalf, 4096), ed::FixedBiasMode::kStep);
  EXPECT_EQ(ed::fixed_bias_mode(nhwc(12), kFloat, 4096), ed::FixedBiasMode::kVector);
  // Channels-first: one bias value per vector where a plane splits into vectors.
  const auto nchw = [](int hw) {
    return params_of("dt:f16,post:bias+relu/g1mb2ic4ih" + std::to_string(hw) + "iw" +
                     std::to_string(hw) + "oc6kh1kw1");
  };
  EXPECT_EQ(ed::fixed_bias_mode(nchw(2), kHalf, 4096), ed::FixedBiasMode::kStep);    // 4 % 8
  EXPECT_EQ(ed::fixed_bias_mode(nchw(2), kFloat, 4096), ed::FixedBiasMode::kPlane);  // 4 % 4
  EXPECT_EQ(ed::fixed_bias_mode(nchw(4), kHalf, 4096), ed::FixedBiasMode::kPlane);   // 16 % 8
  EXPECT_EQ(ed::fixed_bias_mode(nchw(7), kHalf, 4096), ed::FixedBiasMode::kStep);
}

}  // namespace
}  // namespace convplan
