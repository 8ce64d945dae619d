// The text form of a ConvProblem, the enum names, and the stable hash.
//
// Text form: [FLAGS/]DESCRIPTOR.
//   FLAGS: comma-separated key:value pairs, each key at most once:
//     dir:fwd|bwd_data|bwd_filter  dt:TYPE  ct:TYPE  layout:nchw|nhwc|explicit  tc:0|1
//     alpha:A  beta:B  xs:S  ws:S  ys:S  post:CHAIN
//   where TYPE is f32|f16|bf16|f64 (or an alias parse_data_type takes), A and B decimal numbers,
//   S the strides of x, w or y in logical order (N, C, spatial...) joined by 'x' ("802816x1x..").
//   Defaults: fwd, f32, ct = default_compute_type(dt), nchw, tc:1, alpha 1, beta 0. Strides
//   imply layout:explicit, and layout:explicit needs all three. CHAIN: a post-op chain (see
//   PostOps::parse), "bias+add+relu"; none by default.
//   A text has flags when it starts with '/' or with a lower-case word and ':'.
//   DESCRIPTOR: oneDNN benchdnn's convolution descriptor
//     gG mbN icC [idD]ihH iwW ocK [od oh ow] [kd kh kw] [sd sh sw] [pd ph pw] [rd rh rw] [dd dh dw]
//   '_' between entries is ignored; 'n' starts a name that runs to the end and is ignored.
//   As in benchdnn: g=1, mb=2, strides 1 and dilations 0 (dh0 = no dilation: dilation = dh + 1)
//   when not given; ic, oc and each used dimension's i and k letters are required. A dimension
//   is used when one of its i, o, k letters is given, or its s != 1, p, r or dilation letter
//   != 0. d used: 3-D (h and w both given, or both copied from d); else h used: 2-D (w copied
//   from h when w is not used); else w: 1-D. Letters of unused dimensions are ignored.
//   Padding: pX pads before, rX after (our extension); without rX the padding is symmetric. A
//   given oX must match the computed output; given without pX, benchdnn's rule fills pX =
//   ((o-1)*s + ext - i) / 2 with ext = (k-1)*dilation+1, and without rX the pad after is pX when
//   that gives oX, else the pad that does (benchdnn's right padding).
// Canonical form (to_string): only flags that differ from their defaults, in the order above; the
// descriptor as g mb ic i.. oc o.. k.. s.. p.. [r.. when any dimension is asymmetric]
// [d.. when any dilation is not 1], with the w letters for 1-D, h w for 2-D, d h w for 3-D.
#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>
#include <string>
#include <string_view>
#include <system_error>

#include "convplan/problem.h"
#include "core/quoted.h"

namespace convplan {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

template <typename E, size_t N>
StatusOr<E> parse_enum(std::string_view s, const std::array<std::pair<const char*, E>, N>& names,
                       const char* what, const char* accepted) {
  const std::string l = lower(s);
  for (const auto& [name, value] : names)
    if (l == name) return value;
  return invalid_argument(detail::quoted(s) + " is not " + what + " (" + accepted + ")");
}

constexpr std::array<std::pair<const char*, Direction>, 16> kDirectionNames{{
    {"fwd", Direction::kForward},
    {"forward", Direction::kForward},
    {"fwd_d", Direction::kForward},
    {"fwd_b", Direction::kForward},
    {"fwd_i", Direction::kForward},
    {"bwd_data", Direction::kBackwardData},
    {"bwd_d", Direction::kBackwardData},
    {"backward_data", Direction::kBackwardData},
    {"dgrad", Direction::kBackwardData},
    {"bwd_filter", Direction::kBackwardFilter},
    {"bwd_w", Direction::kBackwardFilter},
    {"bwd_weight", Direction::kBackwardFilter},
    {"bwd_weights", Direction::kBackwardFilter},
    {"backward_filter", Direction::kBackwardFilter},
    {"backward_weights", Direction::kBackwardFilter},
    {"wgrad", Direction::kBackwardFilter},
}};
constexpr const char* kDirectionAccepted =
    "fwd, bwd_data, bwd_filter; also forward, fwd_d, fwd_b, fwd_i, bwd_d, backward_data, dgrad, "
    "bwd_w, bwd_weight, bwd_weights, backward_filter, backward_weights, wgrad";

constexpr std::array<std::pair<const char*, DataType>, 15> kDataTypeNames{{
    {"f32", DataType::kFloat},
    {"fp32", DataType::kFloat},
    {"float", DataType::kFloat},
    {"float32", DataType::kFloat},
    {"f16", DataType::kHalf},
    {"fp16", DataType::kHalf},
    {"half", DataType::kHalf},
    {"float16", DataType::kHalf},
    {"bf16", DataType::kBFloat16},
    {"bfloat16", DataType::kBFloat16},
    {"f64", DataType::kDouble},
    {"fp64", DataType::kDouble},
    {"double", DataType::kDouble},
    {"float64", DataType::kDouble},
    {"bfloat", DataType::kBFloat16},
}};
constexpr const char* kDataTypeAccepted =
    "f32, f16, bf16, f64; also fp32, float, float32, fp16, half, float16, bfloat16, bfloat, fp64, "
    "double, float64";

constexpr std::array<std::pair<const char*, Layout>, 11> kLayoutNames{{
    {"nchw", Layout::kChannelsFirst},
    {"ncw", Layout::kChannelsFirst},
    {"ncdhw", Layout::kChannelsFirst},
    {"channels_first", Layout::kChannelsFirst},
    {"nhwc", Layout::kChannelsLast},
    {"nwc", Layout::kChannelsLast},
    {"ndhwc", Layout::kChannelsLast},
    {"channels_last", Layout::kChannelsLast},
    {"explicit", Layout::kExplicit},
    {"strided", Layout::kExplicit},
    {"custom", Layout::kExplicit},
}};
constexpr const char* kLayoutAccepted =
    "nchw, nhwc, explicit; also ncw, ncdhw, channels_first, nwc, ndhwc, channels_last, strided, "
    "custom";

// Shortest decimal that reads back as exactly v (std::to_chars); -0 prints as 0 since it is
// equal to 0 and equal problems must print alike.
std::string format_double(double v) {
  if (v == 0.0) return "0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// The descriptor's letters for spatial dimension d of a problem with `dims` spatial dimensions.
char dim_letter(int dims, int d) {
  static constexpr char kLetters[] = {'d', 'h', 'w'};
  return kLetters[kMaxSpatialDims - dims + d];
}

std::string strides_text(const TensorStrides& s, int rank) {
  std::string out;
  for (int d = 0; d < rank; ++d) {
    if (d > 0) out += 'x';
    out += std::to_string(s[d]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parsing.

// "at 12 ('kh0'): kh must be >= 1".
Status error_at(size_t pos, std::string_view part, const std::string& message) {
  return invalid_argument("at " + std::to_string(pos) + " ('" + std::string(part) +
                          "'): " + message);
}

// The descriptor's entries: scalar ones and one per spatial dimension (0 = d, 1 = h, 2 = w).
enum class Entry { kG, kMb, kIc, kOc, kI, kO, kK, kS, kP, kR, kD };
constexpr int kSpatialEntries = 7;  // kI .. kD

struct EntryName {
  const char* name;
  Entry entry;
  int dim;  // -1 for scalar entries
};

constexpr EntryName kEntryNames[] = {
    {"g", Entry::kG, -1}, {"mb", Entry::kMb, -1}, {"ic", Entry::kIc, -1}, {"oc", Entry::kOc, -1},
    {"id", Entry::kI, 0}, {"ih", Entry::kI, 1},   {"iw", Entry::kI, 2},   {"od", Entry::kO, 0},
    {"oh", Entry::kO, 1}, {"ow", Entry::kO, 2},   {"kd", Entry::kK, 0},   {"kh", Entry::kK, 1},
    {"kw", Entry::kK, 2}, {"sd", Entry::kS, 0},   {"sh", Entry::kS, 1},   {"sw", Entry::kS, 2},
    {"pd", Entry::kP, 0}, {"ph", Entry::kP, 1},   {"pw", Entry::kP, 2},   {"rd", Entry::kR, 0},
    {"rh", Entry::kR, 1}, {"rw", Entry::kR, 2},   {"dd", Entry::kD, 0},   {"dh", Entry::kD, 1},
    {"dw", Entry::kD, 2},
};

int64_t entry_minimum(Entry e) {
  return e == Entry::kP || e == Entry::kR || e == Entry::kD ? 0 : 1;
}

struct Given {
  bool set = false;
  int64_t value = 0;
  size_t pos = 0;
  std::string_view text;  // the whole entry, e.g. "kh3"
  std::string name;       // the letters the value was given under ("kh"; "kh" too when copied to w)
};

struct Descriptor {
  Given scalar[4];                                  // g, mb, ic, oc
  Given spatial[kSpatialEntries][kMaxSpatialDims];  // [entry - kI][d, h, w]
  // REQUIRES: e is one of kG, kMb, kIc, kOc.
  Given& one(Entry e) { return scalar[static_cast<int>(e)]; }
  // REQUIRES: e is one of kI .. kD; 0 <= dim < 3.
  Given& at(Entry e, int dim) {
    return spatial[static_cast<int>(e) - static_cast<int>(Entry::kI)][dim];
  }
};

const char* entry_letter(Entry e) {
  static constexpr const char* kLetters[] = {"g", "mb", "ic", "oc", "i", "o",
                                             "k", "s",  "p",  "r",  "d"};
  return kLetters[static_cast<int>(e)];
}

std::string entry_name(Entry e, char dim) { return std::string(entry_letter(e)) + dim; }

Status parse_entries(std::string_view text, size_t base, Descriptor& desc) {
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '_') {
      ++i;
      continue;
    }
    const size_t start = i;
    if (text[i] == 'n') break;  // a name runs to the end; it is not part of the problem
    while (i < text.size() && text[i] >= 'a' && text[i] <= 'z') ++i;
    const std::string_view letters = text.substr(start, i - start);
    if (letters.empty()) {
      return invalid_argument("unexpected character '" + std::string(1, text[start]) + "' at " +
                              std::to_string(base + start) + " in the descriptor");
    }
    const EntryName* found = nullptr;
    for (const EntryName& e : kEntryNames)
      if (letters == e.name) found = &e;
    if (found == nullptr) {
      return invalid_argument("unknown letter '" + std::string(letters) + "' at " +
                              std::to_string(base + start) +
                              " (the descriptor takes g mb ic id ih iw oc od oh ow kd kh kw sd sh "
                              "sw pd ph pw rd rh rw dd dh dw and n for a name)");
    }
    size_t end = i;
    if (end < text.size() && text[end] == '-') ++end;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    const std::string_view part = text.substr(start, end - start);
    const std::string_view digits = text.substr(i, end - i);
    if (digits.empty() || digits == "-") {
      return error_at(base + start, part, std::string(letters) + " needs a number after it");
    }
    int64_t value = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (r.ec != std::errc()) {
      return error_at(base + start, part,
                      std::string(letters) + "=" + std::string(digits) + " is out of range");
    }
    if (value < entry_minimum(found->entry)) {
      return error_at(
          base + start, part,
          std::string(letters) + " must be >= " + std::to_string(entry_minimum(found->entry)));
    }
    Given& g = found->dim < 0 ? desc.one(found->entry) : desc.at(found->entry, found->dim);
    if (g.set) {
      return error_at(
          base + start, part,
          std::string(letters) + " is given twice (first at " + std::to_string(g.pos) + ")");
    }
    g = Given{true, value, base + start, part, std::string(letters)};
    i = end;
  }
  return ok_status();
}

bool dimension_used(Descriptor& desc, int dim) {
  auto given = [&](Entry e) { return desc.at(e, dim).set; };
  auto value = [&](Entry e) { return desc.at(e, dim).value; };
  return given(Entry::kI) || given(Entry::kO) || given(Entry::kK) ||
         (given(Entry::kS) && value(Entry::kS) != 1) ||
         (given(Entry::kP) && value(Entry::kP) != 0) ||
         (given(Entry::kR) && value(Entry::kR) != 0) || (given(Entry::kD) && value(Entry::kD) != 0);
}

// Where a dimension is first mentioned, for messages.
std::string first_mention(Descriptor& desc, int dim) {
  const Given* first = nullptr;
  for (int e = 0; e < kSpatialEntries; ++e) {
    const Given& g = desc.spatial[e][dim];
    if (g.set && (first == nullptr || g.pos < first->pos)) first = &g;
  }
  if (first == nullptr) return "";
  return detail::quoted(first->text) + " at " + std::to_string(first->pos);
}

// Fills one spatial dimension of p (index `out`) from descriptor dimension `dim`.
Status resolve_dimension(Descriptor& desc, int dim, char letter, int out, ConvProblem& p) {
  Given& gi = desc.at(Entry::kI, dim);
  Given& gk = desc.at(Entry::kK, dim);
  Given& go = desc.at(Entry::kO, dim);
  Given& gs = desc.at(Entry::kS, dim);
  Given& gp = desc.at(Entry::kP, dim);
  Given& gr = desc.at(Entry::kR, dim);
  Given& gd = desc.at(Entry::kD, dim);
  for (Given* g : {&gi, &gk}) {
    if (!g->set) {
      const std::string missing = entry_name(g == &gi ? Entry::kI : Entry::kK, letter);
      return invalid_argument(missing + " is missing: " + first_mention(desc, dim) + " makes " +
                              std::string(1, letter) +
                              " a dimension of the problem, "
                              "which needs i" +
                              letter + " and k" + letter);
    }
  }
  const int64_t i = gi.value, k = gk.value;
  const int64_t s = gs.set ? gs.value : 1;
  // benchdnn's dilation counts the gaps: dh0 is an ordinary filter.
  if (gd.set && gd.value == INT64_MAX)
    return error_at(gd.pos, gd.text, gd.name + " is out of range");
  const int64_t dil = gd.set ? gd.value + 1 : 1;
  const __int128 ext = static_cast<__int128>(k - 1) * dil + 1;
  auto out_size = [&](__int128 pb, __int128 pa) -> __int128 {
    const __int128 span = i + pb + pa - ext;
    return span < 0 ? 0 : span / s + 1;
  };
  // total: the padding (before + after) the given output needs at the least.
  const __int128 total = go.set ? (static_cast<__int128>(go.value) - 1) * s + ext - i : 0;
  __int128 pb = 0, pa = 0;
  if (gp.set) {
    pb = gp.value;
  } else if (go.set) {
    pb = gr.set ? total - gr.value : std::max<__int128>(total, 0) / 2;
    if (pb < 0) {
      return error_at(go.pos, go.text,
                      go.name + "=" + std::to_string(go.value) + " cannot be reached with " +
                          gr.name + "=" + std::to_string(gr.value));
    }
  }
  if (gr.set) {
    pa = gr.value;
  } else if (go.set && out_size(pb, pb) != go.value) {
    pa = std::max<__int128>(total - pb, 0);
  } else {
    pa = pb;
  }
  if (go.set) {
    const __int128 o = out_size(pb, pa);
    if (o != go.value) {
      return error_at(go.pos, go.text,
                      go.name + "=" + std::to_string(go.value) + " does not match the output " +
                          std::to_string(static_cast<int64_t>(o)) + " of i" + letter + ", k" +
                          letter + ", s" + letter + ", p" + letter + ", r" + letter + " and d" +
                          letter);
    }
  }
  if (pb > INT64_MAX || pa > INT64_MAX) {
    return invalid_argument(std::string("the padding of dimension ") + letter + " is out of range");
  }
  p.input[out] = i;
  p.filter[out] = k;
  p.stride[out] = s;
  p.dilation[out] = dil;
  p.pad_before[out] = static_cast<int64_t>(pb);
  p.pad_after[out] = static_cast<int64_t>(pa);
  return ok_status();
}

Status parse_descriptor(std::string_view text, size_t base, ConvProblem& p) {
  Descriptor desc;
  CONVPLAN_RETURN_IF_ERROR(parse_entries(text, base, desc));
  const bool used_d = dimension_used(desc, 0);
  const bool used_h = dimension_used(desc, 1);
  const bool used_w = dimension_used(desc, 2);
  auto copy_dim = [&](int from, int to) {
    for (int e = 0; e < kSpatialEntries; ++e) desc.spatial[e][to] = desc.spatial[e][from];
  };
  if (used_d) {
    if (used_h != used_w) {
      const int given = used_h ? 1 : 2;
      return invalid_argument(std::string("a 3-D problem needs both h and w letters or neither: ") +
                              first_mention(desc, given) + " gives " + (used_h ? "h" : "w") +
                              " but no " + (used_h ? "w" : "h") + " letter is given");
    }
    if (!used_h) {
      copy_dim(0, 1);
      copy_dim(0, 2);
    }
    p.spatial_dims = 3;
  } else if (used_h) {
    if (!used_w) copy_dim(1, 2);
    p.spatial_dims = 2;
  } else if (used_w) {
    p.spatial_dims = 1;
  } else {
    return invalid_argument(
        "the descriptor has no spatial dimension: give iw and kw for 1-D, ih "
        "and kh for 2-D (iw, kw copied), id and kd for 3-D");
  }
  for (int d = 0; d < p.spatial_dims; ++d) {
    const int dim = kMaxSpatialDims - p.spatial_dims + d;
    CONVPLAN_RETURN_IF_ERROR(resolve_dimension(desc, dim, dim_letter(p.spatial_dims, d), d, p));
  }
  const Given& g = desc.one(Entry::kG);
  const Given& mb = desc.one(Entry::kMb);
  const Given& ic = desc.one(Entry::kIc);
  const Given& oc = desc.one(Entry::kOc);
  if (!ic.set) return invalid_argument("ic is missing: the descriptor needs ic and oc");
  if (!oc.set) return invalid_argument("oc is missing: the descriptor needs ic and oc");
  p.groups = g.set ? g.value : 1;
  p.n = mb.set ? mb.value : 2;
  p.c = ic.value;
  p.k = oc.value;
  return ok_status();
}

struct Flag {
  std::string_view value;
  size_t pos = 0;
  std::string_view text;  // "key:value"
  bool set = false;
};

constexpr const char* kFlagKeys[] = {"dir",  "dt", "ct", "layout", "tc",  "alpha",
                                     "beta", "xs", "ws", "ys",     "post"};
constexpr int kFlagCount = 11;

int flag_index(std::string_view key) {
  for (int f = 0; f < kFlagCount; ++f)
    if (key == kFlagKeys[f]) return f;
  return -1;
}

Status parse_flags(std::string_view text, size_t base, Flag (&flags)[kFlagCount]) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    const size_t pos = base + start;
    if (item.empty()) {
      if (text.empty()) break;  // "/descriptor": an empty flags part
      return invalid_argument("empty flag at " + std::to_string(pos) + " in the flags before '/'");
    }
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      return error_at(pos, item, "a flag is key:value");
    }
    const std::string_view key = item.substr(0, colon);
    const int f = flag_index(key);
    if (f < 0) {
      return error_at(pos, item,
                      "unknown flag '" + std::string(key) +
                          "' (dir, dt, ct, layout, tc, alpha, beta, xs, ws, ys, post)");
    }
    if (flags[f].set) {
      return error_at(
          pos, item,
          std::string(key) + " is given twice (first at " + std::to_string(flags[f].pos) + ")");
    }
    flags[f] = Flag{item.substr(colon + 1), pos, item, true};
    start = end + 1;
  }
  return ok_status();
}

Status parse_double_flag(const Flag& f, const char* key, double& out) {
  const std::string_view v = f.value;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size()) {
    return error_at(f.pos, f.text, std::string(key) + ":" + std::string(v) + " is not a number");
  }
  return ok_status();
}

Status parse_strides_flag(const Flag& f, const char* key, int rank, TensorStrides& out) {
  out = TensorStrides{};
  int count = 0;
  size_t start = 0;
  const std::string_view v = f.value;
  while (true) {
    size_t end = v.find('x', start);
    if (end == std::string_view::npos) end = v.size();
    const std::string_view num = v.substr(start, end - start);
    int64_t value = 0;
    const auto r = std::from_chars(num.data(), num.data() + num.size(), value);
    if (num.empty() || r.ec != std::errc() || r.ptr != num.data() + num.size()) {
      return error_at(f.pos, f.text,
                      std::string(key) + " entry '" + std::string(num) +
                          "' is not an integer (strides are joined by 'x')");
    }
    if (count == kMaxTensorRank) {
      return error_at(
          f.pos, f.text,
          std::string(key) + " has more than " + std::to_string(kMaxTensorRank) + " entries");
    }
    out[count++] = value;
    if (end == v.size()) break;
    start = end + 1;
  }
  if (count != rank) {
    return error_at(f.pos, f.text,
                    std::string(key) + " has " + std::to_string(count) +
                        " entries; the descriptor's tensors have " + std::to_string(rank));
  }
  return ok_status();
}

Status apply_flags(const Flag (&flags)[kFlagCount], ConvProblem& p) {
  const Flag& dir = flags[0];
  const Flag& dt = flags[1];
  const Flag& ct = flags[2];
  const Flag& layout = flags[3];
  const Flag& tc = flags[4];
  const Flag& alpha = flags[5];
  const Flag& beta = flags[6];
  const Flag* strides[3] = {&flags[7], &flags[8], &flags[9]};
  const Flag& post = flags[10];
  if (post.set) {
    StatusOr<PostOps> chain = PostOps::parse(post.value);
    // The chain's own positions count from its first character, after "post:".
    if (!chain.ok()) return error_at(post.pos, post.text, chain.status().message());
    p.post_ops = *chain;
  }
  if (dir.set) {
    StatusOr<Direction> d = parse_direction(dir.value);
    if (!d.ok()) return error_at(dir.pos, dir.text, d.status().message());
    p.direction = *d;
  }
  p.data_type = DataType::kFloat;
  if (dt.set) {
    StatusOr<DataType> t = parse_data_type(dt.value);
    if (!t.ok()) {
      return invalid_argument("at " + std::to_string(dt.pos) + ": dt:" + std::string(dt.value) +
                              " is not a data type (f32, f16, bf16, f64)");
    }
    p.data_type = *t;
  }
  p.compute_type = default_compute_type(p.data_type);
  if (ct.set) {
    StatusOr<DataType> t = parse_data_type(ct.value);
    if (!t.ok()) {
      return invalid_argument("at " + std::to_string(ct.pos) + ": ct:" + std::string(ct.value) +
                              " is not a data type (f32, f16, bf16, f64)");
    }
    p.compute_type = *t;
  }
  const bool any_strides = strides[0]->set || strides[1]->set || strides[2]->set;
  p.layout = any_strides ? Layout::kExplicit : Layout::kChannelsFirst;
  if (layout.set) {
    StatusOr<Layout> l = parse_layout(layout.value);
    if (!l.ok()) return error_at(layout.pos, layout.text, l.status().message());
    p.layout = *l;
  }
  if (tc.set) {
    const std::string v = lower(tc.value);
    if (v == "1" || v == "true") {
      p.allow_tensor_cores = true;
    } else if (v == "0" || v == "false") {
      p.allow_tensor_cores = false;
    } else {
      return error_at(tc.pos, tc.text, "tc takes 0 or 1");
    }
  }
  if (alpha.set) CONVPLAN_RETURN_IF_ERROR(parse_double_flag(alpha, "alpha", p.alpha));
  if (beta.set) CONVPLAN_RETURN_IF_ERROR(parse_double_flag(beta, "beta", p.beta));
  static constexpr const char* kStrideKeys[] = {"xs", "ws", "ys"};
  TensorStrides* targets[3] = {&p.x_strides, &p.w_strides, &p.y_strides};
  for (int t = 0; t < 3; ++t) {
    const Flag& f = *strides[t];
    if (f.set && p.layout != Layout::kExplicit) {
      return error_at(f.pos, f.text,
                      std::string(kStrideKeys[t]) + " needs layout:explicit (layout is " +
                          to_string(p.layout) + ")");
    }
    if (!f.set && p.layout == Layout::kExplicit) {
      return invalid_argument(std::string("layout:explicit needs xs, ws and ys; ") +
                              kStrideKeys[t] + " is missing");
    }
    if (f.set) {
      CONVPLAN_RETURN_IF_ERROR(
          parse_strides_flag(f, kStrideKeys[t], p.spatial_dims + 2, *targets[t]));
    }
  }
  return ok_status();
}

// True when the text opens with flags: "/..." or a lower-case word followed by ':'.
bool has_flags(std::string_view text) {
  if (!text.empty() && text[0] == '/') return true;
  size_t i = 0;
  while (i < text.size() && text[i] >= 'a' && text[i] <= 'z') ++i;
  return i > 0 && i < text.size() && text[i] == ':';
}

// FNV-1a, 64 bits, fed with little-endian 8-byte words.
class Fnv1a {
 public:
  void add(uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      hash_ ^= (v >> (8 * b)) & 0xffu;
      hash_ *= 1099511628211ull;
    }
  }
  void add_signed(int64_t v) { add(static_cast<uint64_t>(v)); }
  void add_double(double v) { add(std::bit_cast<uint64_t>(v == 0.0 ? 0.0 : v)); }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 14695981039346656037ull;
};

}  // namespace

StatusOr<Direction> parse_direction(std::string_view s) {
  return parse_enum(s, kDirectionNames, "a direction", kDirectionAccepted);
}
StatusOr<DataType> parse_data_type(std::string_view s) {
  return parse_enum(s, kDataTypeNames, "a data type", kDataTypeAccepted);
}
StatusOr<Layout> parse_layout(std::string_view s) {
  return parse_enum(s, kLayoutNames, "a layout", kLayoutAccepted);
}

std::string ConvProblem::to_string() const {
  const int dims = std::clamp(spatial_dims, 1, kMaxSpatialDims);
  std::string flags;
  auto flag = [&](const std::string& key_value) {
    if (!flags.empty()) flags += ',';
    flags += key_value;
  };
  if (direction != Direction::kForward) flag(std::string("dir:") + convplan::to_string(direction));
  if (data_type != DataType::kFloat) flag(std::string("dt:") + convplan::to_string(data_type));
  if (compute_type != default_compute_type(data_type)) {
    flag(std::string("ct:") + convplan::to_string(compute_type));
  }
  if (layout != Layout::kChannelsFirst) flag(std::string("layout:") + convplan::to_string(layout));
  if (!allow_tensor_cores) flag("tc:0");
  if (alpha != 1.0) flag("alpha:" + format_double(alpha));
  if (beta != 0.0) flag("beta:" + format_double(beta));
  if (layout == Layout::kExplicit) {
    flag("xs:" + strides_text(x_strides, dims + 2));
    flag("ws:" + strides_text(w_strides, dims + 2));
    flag("ys:" + strides_text(y_strides, dims + 2));
  }
  if (!post_ops.empty()) flag("post:" + post_ops.to_string());

  std::string s;
  if (!flags.empty()) s = flags + "/";
  auto spatial = [&](const char* letter, auto value_of) {
    for (int d = 0; d < dims; ++d) {
      s += letter;
      s += dim_letter(dims, d);
      s += std::to_string(value_of(d));
    }
  };
  const SpatialDims out = output();  // guarded: an invalid problem still prints
  // Appended piece by piece, not "g" + ...: see core/quoted.h.
  s.append("g").append(std::to_string(groups)).append("mb").append(std::to_string(n));
  s.append("ic").append(std::to_string(c));
  spatial("i", [&](int d) { return input[d]; });
  s.append("oc").append(std::to_string(k));
  spatial("o", [&](int d) { return out[d]; });
  spatial("k", [&](int d) { return filter[d]; });
  spatial("s", [&](int d) { return stride[d]; });
  spatial("p", [&](int d) { return pad_before[d]; });
  bool asymmetric = false, dilated = false;
  for (int d = 0; d < dims; ++d) {
    asymmetric = asymmetric || pad_after[d] != pad_before[d];
    dilated = dilated || dilation[d] != 1;
  }
  if (asymmetric) spatial("r", [&](int d) { return pad_after[d]; });
  if (dilated) spatial("d", [&](int d) { return dilation[d] - 1; });
  return s;
}

StatusOr<ConvProblem> parse_problem(std::string_view text) {
  size_t base = 0;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
    ++base;
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  if (text.empty()) return invalid_argument("an empty text is not a problem");

  Flag flags[kFlagCount];
  std::string_view descriptor = text;
  size_t descriptor_base = base;
  if (has_flags(text)) {
    const size_t slash = text.find('/');
    if (slash == std::string_view::npos) {
      return invalid_argument(
          "the flags need a '/' before the descriptor (e.g. dir:bwd_data/ic..)");
    }
    CONVPLAN_RETURN_IF_ERROR(parse_flags(text.substr(0, slash), base, flags));
    descriptor = text.substr(slash + 1);
    descriptor_base = base + slash + 1;
  }
  ConvProblem p;
  CONVPLAN_RETURN_IF_ERROR(parse_descriptor(descriptor, descriptor_base, p));
  CONVPLAN_RETURN_IF_ERROR(apply_flags(flags, p));
  Status valid = p.validate();
  if (!valid.ok())
    return invalid_argument(detail::quoted(text) + " is not a valid problem: " + valid.message());
  return p;
}

// The words hashed, in order: direction, spatial_dims, n, c, k, groups; per spatial dimension
// input, filter, pad_before, pad_after, stride, dilation; data_type, compute_type,
// allow_tensor_cores, layout; with layout=explicit the x, w, y strides (rank entries each);
// alpha and beta as IEEE-754 bits (-0 as 0); with a post-op chain (only then, so that the hashes
// of problems without one are those of earlier versions) a marker word, the count and each op's
// kind and scale. Enums hash as their numeric values.
uint64_t ConvProblem::hash() const {
  const int dims = std::clamp(spatial_dims, 0, kMaxSpatialDims);
  Fnv1a h;
  h.add_signed(static_cast<int64_t>(direction));
  h.add_signed(spatial_dims);
  h.add_signed(n);
  h.add_signed(c);
  h.add_signed(k);
  h.add_signed(groups);
  for (int d = 0; d < dims; ++d) {
    h.add_signed(input[d]);
    h.add_signed(filter[d]);
    h.add_signed(pad_before[d]);
    h.add_signed(pad_after[d]);
    h.add_signed(stride[d]);
    h.add_signed(dilation[d]);
  }
  h.add_signed(static_cast<int64_t>(data_type));
  h.add_signed(static_cast<int64_t>(compute_type));
  h.add_signed(allow_tensor_cores ? 1 : 0);
  h.add_signed(static_cast<int64_t>(layout));
  if (layout == Layout::kExplicit) {
    for (const TensorStrides* s : {&x_strides, &w_strides, &y_strides})
      for (int d = 0; d < dims + 2; ++d) h.add_signed((*s)[d]);
  }
  h.add_double(alpha);
  h.add_double(beta);
  if (post_ops.count != 0) {
    h.add(0x706f7374ull);  // "post"
    h.add_signed(post_ops.count);
    for (int i = 0; i < post_ops.count && i < kMaxPostOps; ++i) {
      h.add_signed(static_cast<int64_t>(post_ops.ops[static_cast<size_t>(i)].kind));
      h.add_double(post_ops.ops[static_cast<size_t>(i)].scale);
    }
  }
  return h.value();
}

}  // namespace convplan
