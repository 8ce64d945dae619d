// rewrite_transforms: the bandwidth of the rewrite transform kernels (issue 17: at least 70% of
// the copy bandwidth on the stems' sizes) against cudaMemcpyAsync device-to-device of the same
// bytes. Each transform's traffic is its source read plus its destination written; the copy's is
// twice what it copies, measured in the same run. Each case runs through both transform kernels
// (TransformKernel: staged, pipelined; where the pipelined one does not apply it runs the staged
// one), and the stems' filter transforms too. Prints a table and writes JSON (argv[1], else
// $CONVPLAN_REPORT_DIR/rewrite_transforms.json, else ./rewrite_transforms.json). Asserts nothing.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "convplan/cudnn_backend.h"
#include "convplan/rewrite.h"
#include "cuda_timing.h"
#include "rewrites/rewrite_internal.h"
#include "rewrites/transform_kernels.h"

namespace {

using convplan::Rewrite;

struct Case {
  const char* label;
  const char* problem;
  const char* rewrite;
  convplan::TensorRole tensor;
  bool to_rewritten;
};

constexpr Case kCases[] = {
    {"stem fwd x", "dt:bf16,layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2",
     convplan::TensorRole::kX, true},
    {"stem fwd x", "dt:bf16,layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2c8",
     convplan::TensorRole::kX, true},
    {"stem fwd x", "dt:bf16,layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "c4",
     convplan::TensorRole::kX, true},
    {"stem fwd x", "dt:bf16,layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "uc32",
     convplan::TensorRole::kX, true},
    {"stem fwd x", "dt:bf16,layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2uc32",
     convplan::TensorRole::kX, true},
    {"stem b32 fwd x", "dt:bf16,layout:nhwc/mb32ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2",
     convplan::TensorRole::kX, true},
    {"stem b32 fwd x", "dt:bf16,layout:nhwc/mb32ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "uc32",
     convplan::TensorRole::kX, true},
    {"stem bwd_data dx",
     "dir:bwd_data,dt:bf16,layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2",
     convplan::TensorRole::kX, false},
    {"stem f32 nchw x", "mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2",
     convplan::TensorRole::kX, true},
    {"alexnet fwd x", "dt:bf16,layout:nhwc/mb64ic3ih224iw224oc64kh11kw11sh4sw4ph2pw2", "s2d4",
     convplan::TensorRole::kX, true},
    {"alexnet fwd x", "dt:bf16,layout:nhwc/mb64ic3ih224iw224oc64kh11kw11sh4sw4ph2pw2", "s2d2",
     convplan::TensorRole::kX, true},
    {"3-D stem fwd x", "dt:bf16,layout:nhwc/mb2ic3id32ih112iw112oc32kd3kh7kw7sd2sh2sw2pd1ph3pw3",
     "s2d2", convplan::TensorRole::kX, true},
    {"stem fwd w", "dt:bf16,layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2",
     convplan::TensorRole::kW, true},
    {"alexnet fwd w", "dt:bf16,layout:nhwc/mb64ic3ih224iw224oc64kh11kw11sh4sw4ph2pw2", "s2d4",
     convplan::TensorRole::kW, true},
};

int64_t bytes_of(const convplan::ConvProblem& p, convplan::TensorRole t) {
  return p.shape_of(t).span_elements() * convplan::size_of(p.data_type);
}

}  // namespace

int main(int argc, char** argv) {
  if (!convplan::gpu_available().ok()) {
    std::fprintf(stderr, "rewrite_transforms: no GPU: %s\n",
                 convplan::gpu_available().message().c_str());
    return 3;
  }
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-18s %-8s %-3s %9s %9s %9s %9s %9s %9s %8s %8s\n", "case", "rewrite", "dir",
              "MB moved", "staged", "pipelined", "staged", "pipelined", "copy", "staged",
              "pipelined");
  std::printf("%-18s %-8s %-3s %9s %9s %9s %9s %9s %9s %8s %8s\n", "", "", "", "", "us", "us",
              "GB/s", "GB/s", "GB/s", "% copy", "% copy");
  for (const Case& c : kCases) {
    auto p = convplan::parse_problem(c.problem);
    auto spec = convplan::RewriteSpec::parse(c.rewrite);
    if (!p.ok() || !spec.ok()) return 1;
    auto r = convplan::make_rewrite(*p, *spec);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
      return 1;
    }
    const int64_t a_bytes = bytes_of(r->original, c.tensor),
                  b_bytes = bytes_of(r->rewritten, c.tensor);
    void *a = nullptr, *b = nullptr;
    CHECK_CUDA(cudaMalloc(&a, a_bytes));
    CHECK_CUDA(cudaMalloc(&b, b_bytes));
    CHECK_CUDA(cudaMemset(a, 0x11, a_bytes));
    CHECK_CUDA(cudaMemset(b, 0x11, b_bytes));
    const auto t = convplan::rewrites::transform_desc(*r, c.tensor, c.to_rewritten, 1.0, 0.0);
    const void* src = c.to_rewritten ? a : b;
    void* dst = c.to_rewritten ? b : a;
    using convplan::rewrites::TransformKernel;
    const auto time_kernel = [&](TransformKernel k) {
      return median_ms(stream, [&] {
        if (convplan::rewrites::launch_transform(t, src, dst, stream, k) != 0) std::exit(1);
      });
    };
    const double staged_ms = time_kernel(TransformKernel::kStaged);
    const double ms = time_kernel(TransformKernel::kPipelined);
    const int64_t copy_bytes = std::max(a_bytes, b_bytes);
    void* scratch = nullptr;
    CHECK_CUDA(cudaMalloc(&scratch, copy_bytes));
    const double copy_ms = median_ms(stream, [&] {
      CHECK_CUDA(cudaMemcpyAsync(scratch, c.to_rewritten ? b : a, copy_bytes,
                                 cudaMemcpyDeviceToDevice, stream));
    });
    const double moved = static_cast<double>(a_bytes + b_bytes);
    const double gbps = moved / (ms * 1e6), copy_gbps = 2.0 * copy_bytes / (copy_ms * 1e6);
    const double staged_gbps = moved / (staged_ms * 1e6);
    std::printf("%-18s %-8s %-3s %9.1f %9.1f %9.1f %9.0f %9.0f %9.0f %7.0f%% %7.0f%%\n", c.label,
                c.rewrite, c.to_rewritten ? "to" : "fro", moved / 1e6, staged_ms * 1e3, ms * 1e3,
                staged_gbps, gbps, copy_gbps, 100.0 * staged_gbps / copy_gbps,
                100.0 * gbps / copy_gbps);
    rows.push_back({{"case", c.label},
                    {"problem", c.problem},
                    {"rewrite", c.rewrite},
                    {"tensor", convplan::to_string(c.tensor)},
                    {"to_rewritten", c.to_rewritten},
                    {"bytes_moved", moved},
                    {"ms", ms},
                    {"gbps", gbps},
                    {"copy_gbps", copy_gbps},
                    {"share_of_copy", gbps / copy_gbps},
                    {"kernel", "pipelined"},
                    {"staged_ms", staged_ms},
                    {"staged_gbps", staged_gbps},
                    {"staged_share_of_copy", staged_gbps / copy_gbps}});
    cudaFree(a);
    cudaFree(b);
    cudaFree(scratch);
  }
  std::string path = argc > 1 ? argv[1] : "";
  if (path.empty()) {
    const char* dir = std::getenv("CONVPLAN_REPORT_DIR");
    path = std::string(dir != nullptr ? dir : ".") + "/rewrite_transforms.json";
  }
  std::ofstream(path) << nlohmann::json{{"transforms", rows}}.dump(2) << "\n";
  std::printf("JSON: %s\n", path.c_str());
  return 0;
}
