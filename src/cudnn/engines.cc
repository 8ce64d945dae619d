#include "cudnn/engines.h"

#include <algorithm>
#include <string>

#include "cudnn/check.h"

namespace convplan::cudnn_detail {

NoteSet note_from_numerical(cudnnBackendNumericalNote_t note) {
  switch (note) {
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: return kNoteTensorCore;
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: return kNoteDownConvertInputs;
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return kNoteReducedPrecisionReduction;
    case CUDNN_NUMERICAL_NOTE_FFT: return kNoteFft;
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: return kNoteNonDeterministic;
    case CUDNN_NUMERICAL_NOTE_WINOGRAD: return kNoteWinograd;
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4: return kNoteWinogradTile4x4;
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6: return kNoteWinogradTile6x6;
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return kNoteWinogradTile13x13;
    default: return 0;
  }
}

NoteSet note_from_behavior(cudnnBackendBehaviorNote_t note) {
  switch (note) {
    case CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION: return kNoteRuntimeCompilation;
    case CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER: return kNoteRequiresFilterIntReorder;
    case CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER: return kNoteRequiresBiasIntReorder;
    case CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API: return kNoteSupportsCudaGraphNativeApi;
    default: return 0;
  }
}

StatusOr<int64_t> engine_global_count(const BackendDescriptor& graph) {
  int64_t count = 0;
  CONVPLAN_CUDNN_CHECK(graph.get_int64(CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, &count));
  return count;
}

StatusOr<BackendDescriptor> make_engine(const BackendDescriptor& graph, int64_t global_index) {
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor engine,
                            BackendDescriptor::create(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  CONVPLAN_CUDNN_CHECK(engine.set_descriptor(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph));
  CONVPLAN_CUDNN_CHECK(engine.set_int64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, global_index));
  CONVPLAN_CUDNN_CHECK(engine.finalize());
  return engine;
}

StatusOr<int64_t> engine_global_index(const BackendDescriptor& engine) {
  int64_t index = -1;
  CONVPLAN_CUDNN_CHECK(engine.get_int64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, &index));
  return index;
}

StatusOr<NoteSet> engine_notes(const BackendDescriptor& engine) {
  NoteSet notes = 0;
  cudnnBackendNumericalNote_t numerical[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t count = 0;
  CONVPLAN_CUDNN_CHECK(engine.get(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                  CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, numerical));
  for (int64_t i = 0; i < std::min<int64_t>(count, CUDNN_NUMERICAL_NOTE_TYPE_COUNT); ++i) {
    notes |= note_from_numerical(numerical[i]);
  }
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  count = 0;
  CONVPLAN_CUDNN_CHECK(engine.get(CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                  CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &count, behavior));
  for (int64_t i = 0; i < std::min<int64_t>(count, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT); ++i) {
    notes |= note_from_behavior(behavior[i]);
  }
  return notes;
}

StatusOr<std::vector<KnobInfo>> engine_knob_ranges(const BackendDescriptor& engine) {
  int64_t count = 0;
  CONVPLAN_CUDNN_CHECK(
      engine.get_count(CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR, &count));
  CONVPLAN_ASSIGN_OR_RETURN(
      std::vector<BackendDescriptor> infos,
      BackendDescriptor::create_many(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, count));
  CONVPLAN_CUDNN_CHECK(engine.get_descriptors(CUDNN_ATTR_ENGINE_KNOB_INFO, infos, &count));
  std::vector<KnobInfo> out;
  for (int64_t i = 0; i < std::min<int64_t>(count, static_cast<int64_t>(infos.size())); ++i) {
    const BackendDescriptor& d = infos[static_cast<size_t>(i)];
    cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
    int64_t n = 0;
    KnobInfo k;
    CONVPLAN_CUDNN_CHECK(d.get(CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n, &type));
    CONVPLAN_CUDNN_CHECK(d.get_int64(CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, &k.min_value));
    CONVPLAN_CUDNN_CHECK(d.get_int64(CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, &k.max_value));
    CONVPLAN_CUDNN_CHECK(d.get_int64(CUDNN_ATTR_KNOB_INFO_STRIDE, &k.stride));
    k.type = static_cast<int64_t>(type);
    k.name = knob_type_name(k.type);
    k.default_value = k.min_value;
    out.push_back(std::move(k));
  }
  std::sort(out.begin(), out.end(),
            [](const KnobInfo& a, const KnobInfo& b) { return a.type < b.type; });
  return out;
}

StatusOr<BackendDescriptor> make_engine_config(const BackendDescriptor& engine,
                                               const std::vector<KnobChoice>& knobs) {
  std::vector<BackendDescriptor> choices;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const KnobChoice& k : knobs) {
    CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor c,
                              BackendDescriptor::create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    const cudnnBackendKnobType_t type = static_cast<cudnnBackendKnobType_t>(k.type);
    CONVPLAN_CUDNN_CHECK(c.set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type));
    CONVPLAN_CUDNN_CHECK(c.set_int64(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, k.value));
    CONVPLAN_CUDNN_CHECK(c.finalize());
    raw.push_back(c.get());
    choices.push_back(std::move(c));
  }
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor config,
                            BackendDescriptor::create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  CONVPLAN_CUDNN_CHECK(config.set_descriptor(CUDNN_ATTR_ENGINECFG_ENGINE, engine));
  if (!raw.empty()) {
    CONVPLAN_CUDNN_CHECK(config.set_descriptors(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, raw));
  }
  CONVPLAN_CUDNN_CHECK(config.finalize());
  return config;
}

StatusOr<std::vector<KnobChoice>> engine_config_knobs(const BackendDescriptor& config) {
  // At most one choice per knob type. Asking for the count first (an empty array) answers 0 for
  // the configurations that heuristics return, which hides their knob choices and makes every
  // tuned variant of an engine look like its defaults; cudnn-frontend asks for
  // CUDNN_KNOB_TYPE_COUNTS as well.
  int64_t count = CUDNN_KNOB_TYPE_COUNTS;
  CONVPLAN_ASSIGN_OR_RETURN(
      std::vector<BackendDescriptor> choices,
      BackendDescriptor::create_many(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, count));
  CONVPLAN_CUDNN_CHECK(config.get_descriptors(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, choices, &count));
  std::vector<KnobChoice> out;
  for (int64_t i = 0; i < std::min<int64_t>(count, static_cast<int64_t>(choices.size())); ++i) {
    const BackendDescriptor& c = choices[static_cast<size_t>(i)];
    cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
    int64_t n = 0;
    KnobChoice k;
    CONVPLAN_CUDNN_CHECK(
        c.get(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n, &type));
    CONVPLAN_CUDNN_CHECK(c.get_int64(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, &k.value));
    k.type = static_cast<int64_t>(type);
    out.push_back(k);
  }
  std::sort(out.begin(), out.end());
  // One entry per type (EngineConfig's invariant); cuDNN lists each type once, keep the first.
  out.erase(std::unique(out.begin(), out.end(),
                        [](const KnobChoice& a, const KnobChoice& b) { return a.type == b.type; }),
            out.end());
  return out;
}

StatusOr<BackendDescriptor> engine_of_config(const BackendDescriptor& config) {
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor engine,
                            BackendDescriptor::create(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  std::vector<BackendDescriptor> one;
  one.push_back(std::move(engine));
  int64_t count = 0;
  CONVPLAN_CUDNN_CHECK(config.get_descriptors(CUDNN_ATTR_ENGINECFG_ENGINE, one, &count));
  if (count != 1) {
    return internal_error("engine configuration holds " + std::to_string(count) +
                          " engines, expected 1");
  }
  return std::move(one.front());
}

StatusOr<std::vector<KnobInfo>> knob_infos(const BackendDescriptor& engine) {
  CONVPLAN_ASSIGN_OR_RETURN(std::vector<KnobInfo> infos, engine_knob_ranges(engine));
  if (infos.empty()) return infos;
  // Defaults, where cuDNN reports them: a configuration finalized without choices.
  StatusOr<BackendDescriptor> config = make_engine_config(engine, {});
  if (config.ok()) {
    StatusOr<std::vector<KnobChoice>> defaults = engine_config_knobs(*config);
    if (defaults.ok()) {
      for (KnobInfo& k : infos) {
        for (const KnobChoice& c : *defaults) {
          if (c.type == k.type) k.default_value = c.value;
        }
      }
    }
  }
  return infos;
}

StatusOr<std::vector<HeuristicResult>> heuristic_configs(const BackendDescriptor& graph,
                                                         cudnnBackendHeurMode_t mode) {
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor heur,
                            BackendDescriptor::create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  CONVPLAN_CUDNN_CHECK(heur.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph));
  CONVPLAN_CUDNN_CHECK(heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  CONVPLAN_CUDNN_CHECK(heur.finalize());
  int64_t count = 0;
  CONVPLAN_CUDNN_CHECK(
      heur.get_count(CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, &count));
  CONVPLAN_ASSIGN_OR_RETURN(
      std::vector<BackendDescriptor> configs,
      BackendDescriptor::create_many(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, count));
  CONVPLAN_CUDNN_CHECK(heur.get_descriptors(CUDNN_ATTR_ENGINEHEUR_RESULTS, configs, &count));
  std::vector<HeuristicResult> out;
  for (int64_t i = 0; i < std::min<int64_t>(count, static_cast<int64_t>(configs.size())); ++i) {
    const BackendDescriptor& config = configs[static_cast<size_t>(i)];
    StatusOr<BackendDescriptor> engine = engine_of_config(config);
    if (!engine.ok()) continue;
    StatusOr<int64_t> index = engine_global_index(*engine);
    StatusOr<NoteSet> notes = engine_notes(*engine);
    StatusOr<std::vector<KnobChoice>> knobs = engine_config_knobs(config);
    if (!index.ok() || !notes.ok() || !knobs.ok()) continue;
    HeuristicResult r;
    r.config.engine_id = *index;
    r.config.knobs = std::move(knobs).value();
    r.notes = *notes;
    const bool repeat = std::any_of(out.begin(), out.end(),
                                    [&](const HeuristicResult& o) { return o.config == r.config; });
    if (!repeat) out.push_back(std::move(r));
  }
  return out;
}

Status check_notes_allowed(const ConvProblem& problem, int64_t engine_id, NoteSet notes) {
  const NoteSet tensor_core = kNoteTensorCore | kNoteDownConvertInputs;
  if (problem.data_type == DataType::kFloat && !problem.allow_tensor_cores &&
      (notes & tensor_core) != 0) {
    return not_supported("engine " + std::to_string(engine_id) + " has notes '" +
                         notes_to_string(notes & tensor_core) +
                         "' (TF32 math) and the problem has allow_tensor_cores=false");
  }
  return ok_status();
}

}  // namespace convplan::cudnn_detail
