// epilogue_bandwidth: convplan's epilogue kernel (the second half of an unfused candidate) against
// a device-to-device copy of the same output, on the output shapes of ResNet-50's convolutions
// (suites/resnet50_infer.txt) at a batch size, bf16 channels-last, for the chains bias+relu and
// bias+add+relu (and every activation on one shape, and the other fixed chains), each through the
// generic kernel and the fixed one (epilogue_kernels.cu; a chain without a fixed kernel runs the
// generic one both times, `fixed` false in the JSON). Bandwidth counts the bytes the kernel must
// move: y read and written, plus the residual read (the bias is k values); the copy's is twice what
// it copies, measured in the same run. The goal is >= 70% of the copy's bandwidth. Prints a table
// and writes JSON (kernel_* and ratio: the default kernel, the fixed one where it applies).
//
// Usage: epilogue_bandwidth [--batch N] [--json PATH]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convplan/problem.h"
#include "cuda_timing.h"
#include "epilogues/epilogue.h"

namespace {

using convplan::ConvProblem;

struct Shape {
  const char* name;
  const char* conv;  // without the batch
};

constexpr Shape kShapes[] = {
    {"conv1", "ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3"},
    {"layer1.conv3", "ic64ih56iw56oc256oh56ow56kh1kw1"},
    {"layer1.conv2", "ic64ih56iw56oc64oh56ow56kh3kw3ph1pw1"},
    {"layer2.conv3", "ic128ih28iw28oc512oh28ow28kh1kw1"},
    {"layer3.conv3", "ic256ih14iw14oc1024oh14ow14kh1kw1"},
    {"layer4.conv3", "ic512ih7iw7oc2048oh7ow7kh1kw1"},
    {"layer4.conv2", "ic512ih7iw7oc512oh7ow7kh3kw3ph1pw1"},
};

}  // namespace

int main(int argc, char** argv) {
  int batch = 256;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: epilogue_bandwidth [--batch N] [--json PATH]\n");
      return 2;
    }
  }
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "epilogue_bandwidth: no GPU\n");
    return 1;
  }
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-14s %-18s %9s %9s %9s %9s %9s %7s %7s\n", "layer", "chain", "MB moved", "generic",
              "fixed", "copy", "GB/s", "generic", "fixed");
  std::printf("%-14s %-18s %9s %9s %9s %9s %9s %7s %7s\n", "", "", "", "GB/s", "GB/s", "GB/s", "",
              "% copy", "% copy");
  std::vector<std::pair<std::string, std::string>> cases;
  for (const Shape& sh : kShapes)
    for (const char* chain : {"bias+relu", "bias+add+relu"}) cases.emplace_back(sh.conv, chain);
  for (const char* chain : {"bias", "relu", "add+relu", "bias+add", "bias+gelu", "bias+silu"})
    cases.emplace_back(kShapes[1].conv, chain);
  for (const char* act : {"relu6", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "elu"})
    cases.emplace_back(kShapes[1].conv, std::string("bias+add+") + act);
  for (const auto& [conv, chain] : cases) {
    const std::string text =
        "dt:bf16,layout:nhwc,post:" + chain + "/mb" + std::to_string(batch) + conv;
    convplan::StatusOr<ConvProblem> p = convplan::parse_problem(text);
    if (!p.ok()) {
      std::fprintf(stderr, "%s: %s\n", text.c_str(), p.status().to_string().c_str());
      return 1;
    }
    const size_t y_bytes = static_cast<size_t>(p->y_shape().span_elements()) * 2;
    void *y, *copy, *bias, *residual;
    CHECK_CUDA(cudaMalloc(&y, y_bytes));
    CHECK_CUDA(cudaMalloc(&copy, y_bytes));
    CHECK_CUDA(cudaMalloc(&residual, y_bytes));
    CHECK_CUDA(cudaMalloc(&bias, static_cast<size_t>(p->k) * 2));
    CHECK_CUDA(cudaMemsetAsync(y, 0x3c, y_bytes, s));
    CHECK_CUDA(cudaMemsetAsync(residual, 0x3c, y_bytes, s));
    CHECK_CUDA(cudaMemsetAsync(bias, 0, static_cast<size_t>(p->k) * 2, s));
    namespace ed = convplan::epilogue_detail;
    const auto time_kernel = [&](ed::EpilogueKernel k) {
      return median_ms(s, [&] {
        if (!ed::enqueue_epilogue(s, *p, y, bias, residual, k).ok()) std::exit(1);
      });
    };
    const float generic = time_kernel(ed::EpilogueKernel::kGeneric);
    const float fixed = time_kernel(ed::EpilogueKernel::kFixed);
    const bool has_fixed = ed::epilogue_kernel_for(*p, ed::EpilogueKernel::kFixed, y, residual) ==
                           ed::EpilogueKernel::kFixed;
    const float copy_ms = median_ms(
        s, [&] { CHECK_CUDA(cudaMemcpyAsync(copy, y, y_bytes, cudaMemcpyDeviceToDevice, s)); });
    const bool add = p->post_ops.has(convplan::PostOpKind::kAdd);
    const double moved = static_cast<double>(y_bytes) * (add ? 3 : 2);
    const double generic_gbps = moved / (generic * 1e6), fixed_gbps = moved / (fixed * 1e6);
    const double copy_gbps = 2.0 * static_cast<double>(y_bytes) / (copy_ms * 1e6);
    std::string layer;
    for (const Shape& sh : kShapes)
      if (conv == sh.conv) layer = sh.name;
    std::printf("%-14s %-18s %9.1f %9.0f %9.0f %9.0f %9s %6.0f%% %6.0f%%\n", layer.c_str(),
                chain.c_str(), moved / 1e6, generic_gbps, fixed_gbps, copy_gbps,
                has_fixed ? "" : "(generic)", 100.0 * generic_gbps / copy_gbps,
                100.0 * fixed_gbps / copy_gbps);
    rows.push_back({{"layer", layer},
                    {"problem", p->to_string()},
                    {"chain", chain},
                    {"bytes_moved", moved},
                    {"fixed", has_fixed},
                    {"kernel_ms", fixed},
                    {"copy_ms", copy_ms},
                    {"kernel_gbps", fixed_gbps},
                    {"copy_gbps", copy_gbps},
                    {"ratio", fixed_gbps / copy_gbps},
                    {"generic_ms", generic},
                    {"generic_gbps", generic_gbps},
                    {"generic_ratio", generic_gbps / copy_gbps},
                    {"fixed_ms", fixed},
                    {"fixed_gbps", fixed_gbps},
                    {"fixed_ratio", fixed_gbps / copy_gbps}});
    cudaFree(y);
    cudaFree(copy);
    cudaFree(residual);
    cudaFree(bias);
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << nlohmann::json{{"device", prop.name}, {"batch", batch}, {"rows", rows}}.dump(2) << "\n";
  }
  cudaStreamDestroy(s);
  return 0;
}
