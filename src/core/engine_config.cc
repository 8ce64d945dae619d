// EngineConfig's text form, engine note names and cuDNN knob names.
#include "convplan/engine_config.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <system_error>

#include "core/quoted.h"

namespace convplan {
namespace {

// Reads a decimal int64 at text[pos..], advancing pos; false when there is none.
bool read_int(std::string_view text, size_t& pos, int64_t& out) {
  const char* begin = text.data() + pos;
  const auto r = std::from_chars(begin, text.data() + text.size(), out);
  if (r.ec != std::errc() || r.ptr == begin) return false;
  pos += static_cast<size_t>(r.ptr - begin);
  return true;
}

Status config_error(std::string_view text, const std::string& what) {
  return invalid_argument("engine config '" + std::string(text) + "': " + what);
}

constexpr std::string_view kUnfusedPrefix = "unfused+";

struct NoteName {
  Note bit;
  const char* name;
};

constexpr NoteName kNoteNames[] = {
    {kNoteTensorCore, "tensor_core"},
    {kNoteDownConvertInputs, "down_convert_inputs"},
    {kNoteReducedPrecisionReduction, "reduced_precision_reduction"},
    {kNoteFft, "fft"},
    {kNoteNonDeterministic, "non_deterministic"},
    {kNoteWinograd, "winograd"},
    {kNoteWinogradTile4x4, "winograd_4x4"},
    {kNoteWinogradTile6x6, "winograd_6x6"},
    {kNoteWinogradTile13x13, "winograd_13x13"},
    {kNoteRuntimeCompilation, "runtime_compilation"},
    {kNoteRequiresFilterIntReorder, "requires_filter_int_reorder"},
    {kNoteRequiresBiasIntReorder, "requires_bias_int_reorder"},
    {kNoteSupportsCudaGraphNativeApi, "supports_cuda_graph_native_api"},
};

// cudnnBackendKnobType_t (cudnn_graph.h, cuDNN 9) by value, without CUDNN_KNOB_TYPE_.
// CUDNN_KNOB_TYPE_COUNTS (44) counts the others and is not a knob.
constexpr const char* kKnobNames[] = {
    "SPLIT_K",
    "SWIZZLE",
    "TILE_SIZE",
    "USE_TEX",
    "EDGE",
    "KBLOCK",
    "LDGA",
    "LDGB",
    "CHUNK_K",
    "SPLIT_H",
    "WINO_TILE",
    "MULTIPLY",
    "SPLIT_K_BUF",
    "TILEK",
    "STAGES",
    "REDUCTION_MODE",
    "CTA_SPLIT_K_MODE",
    "SPLIT_K_SLC",
    "IDX_MODE",
    "SLICED",
    "SPLIT_RS",
    "SINGLEBUFFER",
    "LDGC",
    "SPECFILT",
    "KERNEL_CFG",
    "WORKSPACE",
    "TILE_CGA",
    "TILE_CGA_M",
    "TILE_CGA_N",
    "BLOCK_SIZE",
    "OCCUPANCY",
    "ARRAY_SIZE_PER_THREAD",
    "NUM_C_PER_BLOCK",
    "SPLIT_COLS",
    "TILE_ROWS",
    "TILE_COLS",
    "LOAD_SIZE",
    "CTA_COUNT",
    "STREAM_K",
    "SPLIT_P_SLC",
    "TILE_M",
    "TILE_N",
    "WARP_SPEC_CFG",
    "SWAP_AB",
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

StatusOr<EngineConfig> parse_engine(std::string_view text);  // "eng12:k3=1", no rewrite

}  // namespace

std::string EngineConfig::to_string() const {
  std::string s = unfused ? std::string(kUnfusedPrefix) : std::string();
  if (!rewrite.empty()) {
    s += rewrite;
    s += '+';
  }
  s += "eng" + std::to_string(engine_id);
  for (size_t i = 0; i < knobs.size(); ++i) {
    s += i == 0 ? ':' : ',';
    s += 'k' + std::to_string(knobs[i].type) + '=' + std::to_string(knobs[i].value);
  }
  return s;
}

StatusOr<EngineConfig> EngineConfig::parse(std::string_view full) {
  std::string_view rest = full;
  const bool unfused = rest.substr(0, kUnfusedPrefix.size()) == kUnfusedPrefix;
  if (unfused) rest.remove_prefix(kUnfusedPrefix.size());
  std::string_view text = rest;
  std::string rewrite;
  if (const size_t plus = rest.find('+'); plus != std::string_view::npos) {
    rewrite = std::string(rest.substr(0, plus));
    if (rewrite == kUnfusedPrefix.substr(0, kUnfusedPrefix.size() - 1)) {
      return config_error(full, "'unfused' is not a rewrite; 'unfused+' comes once, first");
    }
    if (!is_rewrite_name(rewrite)) {
      std::string what = "rewrite ";
      what += detail::quoted(rewrite);
      what += " before '+' must be lower-case letters and digits (e.g. s2d2)";
      return config_error(full, what);
    }
    text = rest.substr(plus + 1);
  }
  StatusOr<EngineConfig> config = parse_engine(text);
  if (!config.ok()) return config.status();
  config->rewrite = std::move(rewrite);
  config->unfused = unfused;
  return config;
}

bool is_rewrite_name(std::string_view name) {
  if (name.empty()) return false;
  for (char ch : name) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'))) return false;
  }
  return true;
}

namespace {

StatusOr<EngineConfig> parse_engine(std::string_view text) {
  EngineConfig config;
  if (text.substr(0, 3) != "eng")
    return config_error(text, "must start with 'eng' (e.g. eng12:k3=1)");
  size_t pos = 3;
  if (!read_int(text, pos, config.engine_id)) {
    return config_error(text, "expected the engine number after 'eng' at 3");
  }
  if (pos == text.size()) return config;
  if (text[pos] != ':') {
    return config_error(text, "unexpected '" + std::string(text.substr(pos)) + "' at " +
                                  std::to_string(pos) + " (knobs follow a ':')");
  }
  ++pos;
  while (true) {
    const size_t start = pos;
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, end - start);
    KnobChoice knob;
    size_t p = start + 1;
    const bool ok = !item.empty() && item[0] == 'k' && read_int(text, p, knob.type) && p < end &&
                    text[p] == '=' && (++p, read_int(text, p, knob.value)) && p == end;
    if (!ok) {
      return config_error(text, detail::quoted(item) + " at " + std::to_string(start) +
                                    " is not a knob choice k<type>=<value>");
    }
    config.knobs.push_back(knob);
    if (end == text.size()) break;
    pos = end + 1;
  }
  std::sort(config.knobs.begin(), config.knobs.end());
  for (size_t i = 1; i < config.knobs.size(); ++i) {
    if (config.knobs[i].type == config.knobs[i - 1].type) {
      return config_error(text, "knob type " + std::to_string(config.knobs[i].type) + " (" +
                                    knob_type_name(config.knobs[i].type) + ") is repeated");
    }
  }
  return config;
}

}  // namespace

std::string notes_to_string(NoteSet notes) {
  std::string s;
  auto add = [&](const std::string& name) {
    if (!s.empty()) s += ',';
    s += name;
  };
  NoteSet known = 0;
  for (const NoteName& n : kNoteNames) {
    known |= n.bit;
    if ((notes & n.bit) != 0) add(n.name);
  }
  // Bits without a name print as "bit<N>" so that the text still says everything.
  for (int b = 0; b < 32; ++b) {
    const NoteSet bit = NoteSet{1} << b;
    if ((notes & bit) != 0 && (known & bit) == 0) add("bit" + std::to_string(b));
  }
  return s;
}

StatusOr<NoteSet> parse_notes(std::string_view text) {
  NoteSet notes = 0;
  if (trim(text).empty()) return notes;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string_view name = trim(text.substr(start, end - start));
    NoteSet bit = 0;
    for (const NoteName& n : kNoteNames)
      if (name == n.name) bit = n.bit;
    if (bit == 0 && name.substr(0, 3) == "bit") {
      size_t p = 0;
      int64_t b = -1;
      const std::string_view digits = name.substr(3);
      if (read_int(digits, p, b) && p == digits.size() && b >= 0 && b < 32) bit = NoteSet{1} << b;
    }
    if (bit == 0) {
      std::string accepted;
      for (const NoteName& n : kNoteNames)
        accepted += std::string(accepted.empty() ? "" : ", ") + n.name;
      return invalid_argument(detail::quoted(name) + " at " + std::to_string(start) +
                              " is not an engine note (" + accepted + ", or bit<N>)");
    }
    if ((notes & bit) != 0) {
      return invalid_argument("engine note '" + std::string(name) + "' is repeated at " +
                              std::to_string(start));
    }
    notes |= bit;
    if (end == text.size()) break;
    start = end + 1;
  }
  return notes;
}

std::string knob_type_name(int64_t type) {
  constexpr int64_t kCount = sizeof(kKnobNames) / sizeof(kKnobNames[0]);
  if (type >= 0 && type < kCount) return kKnobNames[type];
  return std::string("k").append(std::to_string(type));  // not "k" + ...: see core/quoted.h
}

}  // namespace convplan
