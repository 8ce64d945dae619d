// reference_dump: runs the float64 reference convolution on random data and writes every buffer,
// so that an implementation written elsewhere (check_against_scipy.py) can check the numbers.
//
// Usage: reference_dump OUTDIR < JOBS
//   Each line of JOBS is "SEED PROBLEM" (PROBLEM in parse_problem's text form). Job i (from 0)
//   writes OUTDIR/i/: x_before.f64, w_before.f64, y_before.f64 (the random inputs, the whole
//   span of each tensor in its layout, strided gaps included), x_after.f64, w_after.f64,
//   y_after.f64 (the buffers after reference_convolution), as raw little-endian doubles, and
//   meta.json: {"problem": canonical text, "direction", "output_tensor": "x"|"w"|"y",
//   "x"|"w"|"y": {"dims": [...], "strides": [...], "span": N}}. Values are uniform in [-1, 1]
//   from std::mt19937_64(SEED), drawn for x, then w, then y. A problem with a post-op chain
//   also gets bias.f64 and residual.f64 (drawn after y, the bias first; each only when the
//   chain has the op) and meta.json says "post": the chain's text, and "bias"/"residual": their
//   shapes.
// Exit status: 0 when every job ran; 2 on bad usage; 1 when a job failed (the reason on stderr).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "convplan/problem.h"
#include "convplan/reference.h"

namespace {

using convplan::ConvProblem;
using convplan::TensorShape;

bool write_doubles(const std::filesystem::path& path, const std::vector<double>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()),
            static_cast<std::streamsize>(v.size() * sizeof(double)));
  return static_cast<bool>(out);
}

std::string shape_json(const TensorShape& s) {
  std::ostringstream o;
  o << "{\"dims\": [";
  for (int d = 0; d < s.rank; ++d) o << (d ? ", " : "") << s.dims[d];
  o << "], \"strides\": [";
  for (int d = 0; d < s.rank; ++d) o << (d ? ", " : "") << s.strides[d];
  o << "], \"span\": " << s.span_elements() << "}";
  return o.str();
}

std::vector<double> random_buffer(int64_t size, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(size));
  for (double& e : v) e = u(rng);
  return v;
}

// Runs one job; false (with the reason on stderr) when it fails.
bool run_job(const std::filesystem::path& dir, uint64_t seed, const std::string& text) {
  convplan::StatusOr<ConvProblem> parsed = convplan::parse_problem(text);
  if (!parsed.ok()) {
    std::cerr << "reference_dump: " << text << ": " << parsed.status().to_string() << "\n";
    return false;
  }
  const ConvProblem& p = *parsed;
  std::mt19937_64 rng(seed);
  std::vector<double> x = random_buffer(p.x_shape().span_elements(), rng);
  std::vector<double> w = random_buffer(p.w_shape().span_elements(), rng);
  std::vector<double> y = random_buffer(p.y_shape().span_elements(), rng);
  std::vector<double> bias, residual;
  if (p.post_ops.has(convplan::PostOpKind::kBias)) {
    bias = random_buffer(p.bias_shape().span_elements(), rng);
  }
  if (p.post_ops.has(convplan::PostOpKind::kAdd)) {
    residual = random_buffer(p.residual_shape().span_elements(), rng);
  }
  std::filesystem::create_directories(dir);
  bool ok = write_doubles(dir / "x_before.f64", x) && write_doubles(dir / "w_before.f64", w) &&
            write_doubles(dir / "y_before.f64", y);
  if (!bias.empty()) ok = ok && write_doubles(dir / "bias.f64", bias);
  if (!residual.empty()) ok = ok && write_doubles(dir / "residual.f64", residual);
  const convplan::Status s = convplan::reference_convolution(p, x, w, y, bias, residual);
  if (!s.ok()) {
    std::cerr << "reference_dump: " << text << ": " << s.to_string() << "\n";
    return false;
  }
  ok = ok && write_doubles(dir / "x_after.f64", x) && write_doubles(dir / "w_after.f64", w) &&
       write_doubles(dir / "y_after.f64", y);
  std::ofstream meta(dir / "meta.json");
  meta << "{\"problem\": \"" << p.to_string() << "\", \"direction\": \""
       << convplan::to_string(p.direction) << "\", \"output_tensor\": \""
       << to_string(p.output_tensor()) << "\", \"x\": " << shape_json(p.x_shape())
       << ", \"w\": " << shape_json(p.w_shape()) << ", \"y\": " << shape_json(p.y_shape());
  if (!p.post_ops.empty()) {
    meta << ", \"post\": \"" << p.post_ops.to_string()
         << "\", \"bias\": " << shape_json(p.bias_shape())
         << ", \"residual\": " << shape_json(p.residual_shape());
  }
  meta << "}\n";
  ok = ok && static_cast<bool>(meta);
  if (!ok) std::cerr << "reference_dump: could not write " << dir << "\n";
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: reference_dump OUTDIR < JOBS   (each line of JOBS: SEED PROBLEM)\n";
    return 2;
  }
  const std::filesystem::path out(argv[1]);
  std::string line;
  int index = 0;
  bool all_ok = true;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    uint64_t seed = 0;
    std::string text;
    if (!(in >> seed >> text)) {
      std::cerr << "reference_dump: job " << index << ": expected 'SEED PROBLEM', got '" << line
                << "'\n";
      return 2;
    }
    all_ok = run_job(out / std::to_string(index), seed, text) && all_ok;
    ++index;
  }
  return all_ok ? 0 : 1;
}
