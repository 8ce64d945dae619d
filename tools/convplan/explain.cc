// `convplan explain`: the problem's figures and its rewrites, as text and JSON.
#include "explain.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "convplan/rewrite.h"

namespace convplan::cli {
namespace {

std::string shape_text(const TensorShape& s) {
  std::string t = "[";
  for (int i = 0; i < s.rank; ++i) {
    if (i) t += ',';  // not (i ? "," : "") + std::string: GCC 12's false -Wrestrict at -O3
    t += std::to_string(s.dims[i]);
  }
  return t + "]";
}

nlohmann::json shape_json(const TensorShape& s) {
  nlohmann::json j = nlohmann::json::array();
  for (int i = 0; i < s.rank; ++i) j.push_back(s.dims[i]);
  return j;
}

std::string fmt(double v, const char* f = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// The figures a problem and a rewritten problem share.
nlohmann::json figures(const ConvProblem& p, const Rates& rates) {
  return {{"problem", p.to_string()},
          {"x", shape_json(p.x_shape())},
          {"w", shape_json(p.w_shape())},
          {"y", shape_json(p.y_shape())},
          {"flops", p.flops()},
          {"min_bytes", p.min_bytes()},
          {"roofline_floor_ms", roofline_floor_ms(p, rates)}};
}

// The transforms' traffic: each transformed tensor read in one form and written in the other.
double transform_bytes(const Rewrite& r) {
  double bytes = 0;
  for (TensorRole t : kTensorRoles) {
    if (!r.transforms(t)) continue;
    auto span = [&](const ConvProblem& p) {
      const TensorShape s = p.shape_of(t);
      return static_cast<double>(s.span_elements() * size_of(p.data_type));
    };
    bytes += span(r.original) + span(r.rewritten);
  }
  return bytes;
}

// The rewritten problem's floor with the transforms' traffic added to its memory side.
double floor_with_transforms_ms(const Rewrite& r, const Rates& rates) {
  if (rates.matrix_tflops <= 0 || rates.copy_gbps <= 0) return -1;
  const double compute_ms = r.rewritten.flops() / (rates.matrix_tflops * 1e12) * 1e3;
  const double memory_ms =
      (r.rewritten.min_bytes() + transform_bytes(r)) / (rates.copy_gbps * 1e9) * 1e3;
  return std::max(compute_ms, memory_ms);
}

}  // namespace

nlohmann::json explain_json(const ConvProblem& p, const Rates& rates) {
  nlohmann::json j = figures(p, rates);
  j["peak_tflops"] = rates.matrix_tflops;
  j["peak_gbps"] = rates.copy_gbps;
  nlohmann::json rewrites = nlohmann::json::array();
  for (const Rewrite& r : applicable_rewrites(p)) {
    nlohmann::json e = figures(r.rewritten, rates);
    e["name"] = r.name();
    e["scratch_bytes"] = r.scratch_bytes();
    e["flops_ratio"] = r.rewritten.flops() / p.flops();
    e["transform_bytes"] = transform_bytes(r);
    e["roofline_floor_with_transforms_ms"] = floor_with_transforms_ms(r, rates);
    rewrites.push_back(std::move(e));
  }
  j["rewrites"] = std::move(rewrites);
  return j;
}

std::string explain_text(const ConvProblem& p, const Rates& rates) {
  std::ostringstream out;
  const SpatialDims o = p.output();
  std::string spatial;
  for (int d = 0; d < p.spatial_dims; ++d) {
    if (d) spatial += 'x';  // appended: see shape_text
    spatial += std::to_string(o[d]);
  }
  out << "problem    " << p.to_string() << "\n"
      << "output     " << spatial << " (x " << shape_text(p.x_shape()) << ", w "
      << shape_text(p.w_shape()) << ", y " << shape_text(p.y_shape()) << ", logical NC...)\n"
      << "flops      " << fmt(p.flops() / 1e9, "%.3f") << " GFLOP\n"
      << "min bytes  " << fmt(p.min_bytes() / 1e6, "%.3f") << " MB\n"
      << "floor      " << fmt(roofline_floor_ms(p, rates), "%.4f") << " ms at "
      << fmt(rates.matrix_tflops) << " TFLOP/s, " << fmt(rates.copy_gbps) << " GB/s\n";
  const std::vector<Rewrite> rewrites = applicable_rewrites(p);
  out << "rewrites   " << rewrites.size() << (rewrites.empty() ? " (none applies)\n" : "\n");
  for (const Rewrite& r : rewrites) {
    out << "  " << r.name() << "  " << r.rewritten.to_string() << "\n"
        << "    flops x" << fmt(r.rewritten.flops() / p.flops(), "%.3f") << ", scratch "
        << fmt(static_cast<double>(r.scratch_bytes()) / 1e6, "%.3f") << " MB, floor "
        << fmt(roofline_floor_ms(r.rewritten, rates), "%.4f") << " ms, with the transforms' "
        << fmt(transform_bytes(r) / 1e6, "%.3f") << " MB "
        << fmt(floor_with_transforms_ms(r, rates), "%.4f") << " ms\n";
  }
  return out.str();
}

}  // namespace convplan::cli
