// Rewrite specs, the rewritten problem and which rewrites apply.
#include "convplan/rewrite.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <string>

#include "rewrites/rewrite_internal.h"

namespace convplan {
namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How many rewritten channels one original channel becomes: b per blocked dimension, the filter's
// width in an unfolded last one.
int64_t channel_factor(const RewriteSpec& s, const ConvProblem& p) {
  int64_t v = 1;
  for (int d = 0; d < p.spatial_dims; ++d) {
    const bool unfolded = s.unfold && d == p.spatial_dims - 1;
    v *= unfolded ? p.filter[d] : s.block;
  }
  return v;
}

// Reads "<prefix><digits>" at pos; false when the prefix is not there.
bool read_part(std::string_view text, size_t& pos, std::string_view prefix, int64_t& out) {
  if (text.substr(pos, prefix.size()) != prefix) return false;
  const char* begin = text.data() + pos + prefix.size();
  const auto r = std::from_chars(begin, text.data() + text.size(), out);
  if (r.ec != std::errc() || r.ptr == begin) return false;
  pos = static_cast<size_t>(r.ptr - text.data());
  return true;
}

// The spatial geometry of dimension d after blocking: rewritten input, filter, padding.
void block_dimension(const ConvProblem& p, int64_t b, int d, ConvProblem& q, int64_t& offset) {
  const int64_t out = p.output()[d];
  if (b == 1) {
    offset = 0;
    return;  // q keeps p's geometry
  }
  const int64_t pad = ceil_div(p.pad_before[d], b);
  offset = pad * b - p.pad_before[d];
  const int64_t filter = ceil_div(p.filter[d] + offset, b);
  const int64_t stride = p.stride[d] / b;
  // The rewritten input rows the output reads, from -pad: crop the rest, or pad after.
  const int64_t needed = (out - 1) * stride + filter - pad;
  const int64_t have = ceil_div(p.input[d], b);
  q.input[d] = std::min(needed, have);
  q.filter[d] = filter;
  q.stride[d] = stride;
  q.pad_before[d] = pad;
  q.pad_after[d] = needed - q.input[d];
}

// The unfolded last dimension: one output position per rewritten input position, its taps in
// the channels (the transform reads x[o*stride + s - pad]).
void unfold_dimension(const ConvProblem& p, int d, ConvProblem& q) {
  q.input[d] = p.output()[d];
  q.filter[d] = 1;
  q.stride[d] = 1;
  q.pad_before[d] = 0;
  q.pad_after[d] = 0;
}

}  // namespace

std::string RewriteSpec::name() const {
  // Appended piece by piece, not "c" + std::to_string(..): GCC 12's false -Wrestrict at -O3
  // (core/quoted.h) fails a Release build with CONVPLAN_WERROR.
  std::string s;
  if (block > 1) s.append("s2d").append(std::to_string(block));
  if (unfold) s.append("u");
  if (c_multiple > 1) s.append("c").append(std::to_string(c_multiple));
  if (k_multiple > 1) s.append("k").append(std::to_string(k_multiple));
  return s;
}

StatusOr<RewriteSpec> RewriteSpec::parse(std::string_view name) {
  RewriteSpec s;
  size_t pos = 0;
  auto bad = [&](const std::string& what) {
    return invalid_argument("rewrite '" + std::string(name) + "': " + what + " at " +
                            std::to_string(pos) +
                            " (expected [s2d<b>][u][c<m>][k<m>], e.g. s2d2c16)");
  };
  if (name.substr(0, 3) == "s2d" && (!read_part(name, pos, "s2d", s.block) || s.block < 2)) {
    return bad("block must be a number >= 2");
  }
  if (pos < name.size() && name[pos] == 'u') {
    s.unfold = true;
    ++pos;
  }
  if (pos < name.size() && name[pos] == 'c' &&
      (!read_part(name, pos, "c", s.c_multiple) || s.c_multiple < 2)) {
    return bad("channel multiple must be a number >= 2");
  }
  if (pos < name.size() && name[pos] == 'k' &&
      (!read_part(name, pos, "k", s.k_multiple) || s.k_multiple < 2)) {
    return bad("k multiple must be a number >= 2");
  }
  if (pos != name.size() || name.empty())
    return bad("unexpected '" + std::string(name.substr(pos)) + "'");
  return s;
}

bool Rewrite::transforms(TensorRole tensor) const {
  const bool channels = rewritten.c != original.c || spec.block > 1 || spec.unfold;
  switch (tensor) {
    case TensorRole::kX: return channels;
    case TensorRole::kW: return channels || rewritten.k != original.k;
    case TensorRole::kY: return rewritten.k != original.k;
  }
  return false;
}

int64_t Rewrite::scratch_bytes() const {
  int64_t total = 0;
  for (TensorRole t : kTensorRoles) {
    if (!transforms(t)) continue;
    const TensorShape s = rewritten.shape_of(t);
    total += round_up(s.span_elements() * size_of(rewritten.data_type), rewrites::kScratchAlign);
  }
  return total;
}

StatusOr<Rewrite> make_rewrite(const ConvProblem& p, const RewriteSpec& spec) {
  CONVPLAN_RETURN_IF_ERROR(p.validate());
  const std::string name = spec.name();
  auto no = [&](const std::string& why) {
    return not_supported("rewrite " + name + " of " + p.to_string() + ": " + why);
  };
  if (name.empty()) return no("the identity is not a rewrite");
  if (spec.block < 1 || spec.c_multiple < 1 || spec.k_multiple < 1)
    return no("block and multiples must be >= 1");
  if (p.layout == Layout::kExplicit) return no("layout=explicit (only packed nchw and nhwc)");
  if (p.groups != 1) return no("groups=" + std::to_string(p.groups) + " (only 1)");
  // Unfolded, an input element feeds several rewritten channels: mapping a gradient back would
  // sum them (backward-data), which a gather cannot do; forward only.
  if (spec.unfold && p.direction != Direction::kForward)
    return no(std::string("unfold with dir=") + to_string(p.direction) + " (forward only)");
  Rewrite r;
  r.spec = spec;
  r.original = p;
  ConvProblem q = p;
  for (int d = 0; d < p.spatial_dims; ++d) {
    if (p.dilation[d] != 1)
      return no("dilation[" + std::to_string(d) + "]=" + std::to_string(p.dilation[d]) +
                " (only 1)");
    if (spec.unfold && d == p.spatial_dims - 1) {
      unfold_dimension(p, d, q);
      continue;
    }
    if (p.stride[d] % spec.block != 0) {
      return no("block " + std::to_string(spec.block) + " does not divide stride[" +
                std::to_string(d) + "]=" + std::to_string(p.stride[d]));
    }
    block_dimension(p, spec.block, d, q, r.filter_offset[d]);
    if (q.input[d] < 1) return no("input[" + std::to_string(d) + "] would be empty");
  }
  q.c = round_up(p.c * channel_factor(spec, p), spec.c_multiple);
  q.k = round_up(p.k, spec.k_multiple);
  r.rewritten = q;
  if (!r.transforms(TensorRole::kX) && !r.transforms(TensorRole::kW) &&
      !r.transforms(TensorRole::kY))
    return no("changes nothing");
  // The chain runs inside the inner plan on the user's y, bias and residual (forward is the only
  // direction with a chain): exact while y keeps its shape; a padded k would change all three.
  if (!p.post_ops.empty() && r.transforms(TensorRole::kY)) {
    return no("post:" + p.post_ops.to_string() +
              " with k padded (the chain reads the user's k channels)");
  }
  // The output written by the inner plan: the user's (alpha, beta kept) or scratch (1, 0).
  if (r.transforms(p.output_tensor())) {
    r.rewritten.alpha = 1.0;
    r.rewritten.beta = 0.0;
  }
  if (q.output() != p.output())
    return internal_error("rewrite " + name + " of " + p.to_string() + " changes the output size");
  CONVPLAN_RETURN_IF_ERROR(r.rewritten.validate().with_context("rewrite " + name));
  return r;
}

std::vector<Rewrite> applicable_rewrites(const ConvProblem& p) {
  std::vector<RewriteSpec> specs;
  if (!p.validate().ok()) return {};
  int64_t g = 0;
  for (int d = 0; d < p.spatial_dims; ++d) g = std::gcd(g, p.stride[d]);
  auto add = [&](RewriteSpec s) {
    if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(s);
  };
  // A chain reads the user's k channels (bias, residual, y): k stays as it is under one.
  const int64_t k_mult = p.k % 8 != 0 && p.post_ops.empty() ? 8 : 1;
  // Channel padding alone goes to one multiple: 16 bytes of channels (8 of fp16/bf16, 4 of
  // fp32), what the tensor-core kernels load at once. Padded alone to 4 or 16 channels, the bf16
  // stems never won on the H200 (issue 17: a rewrite stays only where it wins), and each costs the
  // tuner a heuristics query and six timed candidates. After space-to-depth every multiple stays:
  // s2d2c16 won the 3-D stem.
  const int64_t aligned = std::max<int64_t>(4, 16 / size_of(p.data_type));
  auto with_padding = [&](int64_t block, int64_t channels) {
    if (block > 1) add({block, 1, k_mult});
    int64_t last = channels;
    for (int64_t m : {4, 8, 16}) {
      if (round_up(channels, m) == last) continue;  // the same rewritten problem as before
      if (block == 1 && m != aligned) continue;
      last = round_up(channels, m);
      add({block, m, k_mult});
    }
  };
  if (p.c < 16) {
    for (int64_t b = 2; b <= g; ++b) {
      if (g % b != 0) continue;
      int64_t v = 1;
      for (int d = 0; d < p.spatial_dims; ++d) v *= b;
      with_padding(b, p.c * v);
    }
  }
  if (p.c % 8 != 0) with_padding(1, p.c);
  if (k_mult > 1) add({1, 1, k_mult});
  // Unfolding pays where the few channels meet a wide filter; padded to a whole K-slice of 32.
  const int last = p.spatial_dims - 1;
  if (p.direction == Direction::kForward && p.c < 16 && p.filter[last] > 1) {
    for (int64_t b = 1; b <= g; ++b) {
      if (g % b == 0) add({b, 32, k_mult, true});
    }
  }
  std::vector<Rewrite> out;
  for (const RewriteSpec& s : specs) {
    StatusOr<Rewrite> r = make_rewrite(p, s);
    if (!r.ok()) continue;
    bool dup = false;
    for (const Rewrite& o : out) dup = dup || o.rewritten == r->rewritten;
    if (!dup) out.push_back(std::move(r).value());
  }
  return out;
}

}  // namespace convplan
