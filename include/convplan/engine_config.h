// EngineConfig: which cuDNN engine runs a problem and with which knob choices, as plain data that
// can be stored, shared between threads and processes, and rebuilt into a plan on any handle.
// Also the engine notes (numerical and behaviour) that the tuner's filters look at, and the knob
// ranges an engine offers.
//
// Value types; thread-compatible.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "convplan/export.h"
#include "convplan/status.h"

namespace convplan {

// One knob set to one value. `type` is cuDNN's cudnnBackendKnobType_t value.
struct CONVPLAN_EXPORT KnobChoice {
  int64_t type = 0;
  int64_t value = 0;
  auto operator<=>(const KnobChoice&) const = default;
};

struct CONVPLAN_EXPORT EngineConfig {
  int64_t engine_id = -1;         // cuDNN's global engine index (CUDNN_ATTR_ENGINE_GLOBAL_INDEX)
  std::vector<KnobChoice> knobs;  // sorted by type, one entry per type
  // An exact problem rewrite (convplan/rewrite.h) whose rewritten problem the engine runs, by
  // name ("s2d2", "c8"; lower-case letters and digits); "" for the problem itself.
  std::string rewrite = {};  // "= {}": {id, knobs} aggregates need no third initializer
  // For a problem with a post-op chain: false, the engine runs the whole graph (convolution and
  // chain fused); true, the engine runs the convolution alone and convplan's epilogue kernel
  // then applies the chain in one pass over the output. Always false without a chain.
  bool unfused = false;

  // "eng12" or "eng12:k3=1,k10=2" (knob types by number, sorted), after "<rewrite>+" when there
  // is one: "s2d2+eng62:k3=1", and after "unfused+" when unfused: "unfused+eng12:k3=1",
  // "unfused+s2d2+eng62" ("unfused" is no rewrite name). parse(to_string()) == *this; parse sorts
  // the knobs and rejects a repeated type, naming it.
  std::string to_string() const;
  static StatusOr<EngineConfig> parse(std::string_view text);
  auto operator<=>(const EngineConfig&) const = default;
};

// Whether `name` can be EngineConfig::rewrite: non-empty, lower-case letters and digits.
CONVPLAN_EXPORT bool is_rewrite_name(std::string_view name);

// Engine notes as bits: numerical notes (what a filter may forbid), then behaviour notes.
enum Note : uint32_t {
  kNoteTensorCore = 1u << 0,
  kNoteDownConvertInputs = 1u << 1,
  kNoteReducedPrecisionReduction = 1u << 2,
  kNoteFft = 1u << 3,
  kNoteNonDeterministic = 1u << 4,
  kNoteWinograd = 1u << 5,
  kNoteWinogradTile4x4 = 1u << 6,
  kNoteWinogradTile6x6 = 1u << 7,
  kNoteWinogradTile13x13 = 1u << 8,
  kNoteRuntimeCompilation = 1u << 16,
  kNoteRequiresFilterIntReorder = 1u << 17,
  kNoteRequiresBiasIntReorder = 1u << 18,
  kNoteSupportsCudaGraphNativeApi = 1u << 19,
};
using NoteSet = uint32_t;

// "tensor_core,non_deterministic" (empty for none); parse takes the same names.
CONVPLAN_EXPORT std::string notes_to_string(NoteSet notes);
CONVPLAN_EXPORT StatusOr<NoteSet> parse_notes(std::string_view text);

// The range one knob of one engine accepts (CUDNN_ATTR_KNOB_INFO_*).
struct CONVPLAN_EXPORT KnobInfo {
  int64_t type = 0;
  std::string name;  // cuDNN's name without the prefix: "SPLIT_K", "TILE_SIZE", ...
  int64_t min_value = 0;
  int64_t max_value = 0;
  int64_t stride = 1;
  int64_t default_value = 0;
};

// cuDNN's knob name for a knob type ("SPLIT_K"), or "k<type>" for an unknown one.
CONVPLAN_EXPORT std::string knob_type_name(int64_t type);

}  // namespace convplan
