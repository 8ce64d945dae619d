// Engines of an operation graph: creating one by global index, its notes and knobs, engine
// configurations (knob choices) in both directions, and the heuristics' answers.
// Internal to src/cudnn; every function is thread-compatible (fresh descriptors each call).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <vector>

#include "convplan/backend.h"
#include "convplan/engine_config.h"
#include "convplan/status.h"
#include "cudnn/descriptor.h"

namespace convplan::cudnn_detail {

// cuDNN's notes as convplan's Note bits; notes convplan has no bit for give 0
// (CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP, CUDNN_BEHAVIOR_NOTE_CUBLASLT_DEPENDENCY, unknown ones).
NoteSet note_from_numerical(cudnnBackendNumericalNote_t note);
NoteSet note_from_behavior(cudnnBackendBehaviorNote_t note);

// CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT of a finalized graph.
StatusOr<int64_t> engine_global_count(const BackendDescriptor& graph);

// A finalized engine; cuDNN's refusal (usually kNotSupported) when it cannot run the graph.
StatusOr<BackendDescriptor> make_engine(const BackendDescriptor& graph, int64_t global_index);

// Read from a finalized engine.
StatusOr<int64_t> engine_global_index(const BackendDescriptor& engine);
StatusOr<NoteSet> engine_notes(const BackendDescriptor& engine);
// Type, range and stride of each knob (default_value left at min_value; see knob_infos()).
StatusOr<std::vector<KnobInfo>> engine_knob_ranges(const BackendDescriptor& engine);

// A finalized engine configuration with the given knob choices (may be empty: cuDNN's defaults).
StatusOr<BackendDescriptor> make_engine_config(const BackendDescriptor& engine,
                                               const std::vector<KnobChoice>& knobs);
// The knob choices recorded in a finalized engine configuration, sorted by type.
StatusOr<std::vector<KnobChoice>> engine_config_knobs(const BackendDescriptor& config);
// The engine of a finalized engine configuration (or of a plan, through
// CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG first).
StatusOr<BackendDescriptor> engine_of_config(const BackendDescriptor& config);

// The engine's knobs with default_value: the value of that knob in an engine configuration
// finalized without choices, where cuDNN reports one; else min_value.
StatusOr<std::vector<KnobInfo>> knob_infos(const BackendDescriptor& engine);

// Engine configurations from a heuristics mode, in the heuristics' order; results whose engine
// cannot be read back are left out, and repeats of one configuration are kept once (first place).
struct HeuristicResult {
  EngineConfig config;
  NoteSet notes = 0;
};
StatusOr<std::vector<HeuristicResult>> heuristic_configs(const BackendDescriptor& graph,
                                                         cudnnBackendHeurMode_t mode);

// kNotSupported (naming the engine and the notes) when the problem forbids what the notes say:
// tensor cores or down-converted inputs for fp32 data with allow_tensor_cores = false.
Status check_notes_allowed(const ConvProblem& problem, int64_t engine_id, NoteSet notes);

}  // namespace convplan::cudnn_detail
