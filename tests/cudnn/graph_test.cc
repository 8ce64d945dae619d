// What the cudnn backend does without a GPU: the geometry cuDNN is told (1-D expanded to 2-D),
// graphs for every direction, rank, type and layout (cuDNN finalizes graphs, engines and
// heuristics without a device), note mapping, pointer checks, and honest "no device" answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "convplan/cudnn_backend.h"
#include "cudnn/engines.h"
#include "cudnn/graph.h"
#include "cudnn/plan.h"

namespace convplan::cudnn_detail {
namespace {

ConvProblem problem_1d(Layout layout) {
  ConvProblem p;
  p.spatial_dims = 1;
  p.n = 2;
  p.c = 6;
  p.k = 4;
  p.groups = 2;
  p.input = {10, 1, 1};
  p.filter = {3, 1, 1};
  p.pad_before = {2, 0, 0};
  p.pad_after = {1, 0, 0};
  p.stride = {2, 1, 1};
  p.dilation = {2, 1, 1};
  p.layout = layout;
  return p;
}

ConvProblem problem_2d() {
  ConvProblem p;
  p.n = 2;
  p.c = 8;
  p.k = 16;
  p.input = {9, 7, 1};
  p.filter = {3, 3, 1};
  p.pad_before = {1, 1, 0};
  p.pad_after = {1, 1, 0};
  return p;
}

TEST(ConvGeometry, OneDimensionalProblemGetsASizeOneDimensionFirst) {
  const ConvProblem p = problem_1d(Layout::kChannelsFirst);
  const ConvGeometry g = conv_geometry(p);
  ASSERT_EQ(g.spatial_dims, 2);
  // output = (10 + 2 + 1 - 2*(3-1) - 1) / 2 + 1 = 5
  const TensorShape y = p.y_shape();
  ASSERT_EQ(y.dims[2], 5);
  EXPECT_EQ(g.x.rank, 4);
  EXPECT_EQ((std::vector<int64_t>(g.x.dims.begin(), g.x.dims.begin() + 4)),
            (std::vector<int64_t>{2, 6, 1, 10}));
  EXPECT_EQ((std::vector<int64_t>(g.x.strides.begin(), g.x.strides.begin() + 4)),
            (std::vector<int64_t>{60, 10, 10, 1}));
  EXPECT_EQ((std::vector<int64_t>(g.w.dims.begin(), g.w.dims.begin() + 4)),
            (std::vector<int64_t>{4, 3, 1, 3}));  // c / groups = 3
  EXPECT_EQ((std::vector<int64_t>(g.y.dims.begin(), g.y.dims.begin() + 4)),
            (std::vector<int64_t>{2, 4, 1, 5}));
  EXPECT_EQ(g.pre_padding[0], 0);
  EXPECT_EQ(g.pre_padding[1], 2);
  EXPECT_EQ(g.post_padding[0], 0);
  EXPECT_EQ(g.post_padding[1], 1);
  EXPECT_EQ(g.stride[0], 1);
  EXPECT_EQ(g.stride[1], 2);
  EXPECT_EQ(g.dilation[0], 1);
  EXPECT_EQ(g.dilation[1], 2);
}

TEST(ConvGeometry, OneDimensionalChannelsLastStaysPacked) {
  const ConvProblem p = problem_1d(Layout::kChannelsLast);
  const ConvGeometry g = conv_geometry(p);
  // x is (N, W, C) in memory: strides N=60, C=1, W=6; the inserted H is packed outside W.
  EXPECT_EQ((std::vector<int64_t>(g.x.strides.begin(), g.x.strides.begin() + 4)),
            (std::vector<int64_t>{60, 1, 60, 6}));
}

TEST(ConvGeometry, TwoAndThreeDimensionalProblemsAreTakenAsTheyAre) {
  const ConvProblem p = problem_2d();
  const ConvGeometry g = conv_geometry(p);
  EXPECT_EQ(g.spatial_dims, 2);
  EXPECT_EQ(g.x.rank, 4);
  const TensorShape x = p.x_shape();
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(g.x.dims[d], x.dims[d]);
    EXPECT_EQ(g.x.strides[d], x.strides[d]);
  }
  ConvProblem p3 = p;
  p3.spatial_dims = 3;
  p3.input = {4, 5, 6};
  p3.filter = {1, 3, 3};
  p3.pad_before = {0, 1, 1};
  p3.pad_after = {0, 1, 1};
  const ConvGeometry g3 = conv_geometry(p3);
  EXPECT_EQ(g3.spatial_dims, 3);
  EXPECT_EQ(g3.w.rank, 5);
  EXPECT_EQ(g3.y.dims[2], 4);
}

TEST(ConvGeometry, DataTypesMapToCudnnTypes) {
  EXPECT_EQ(cudnn_data_type(DataType::kFloat), CUDNN_DATA_FLOAT);
  EXPECT_EQ(cudnn_data_type(DataType::kHalf), CUDNN_DATA_HALF);
  EXPECT_EQ(cudnn_data_type(DataType::kBFloat16), CUDNN_DATA_BFLOAT16);
  EXPECT_EQ(cudnn_data_type(DataType::kDouble), CUDNN_DATA_DOUBLE);
}

// Every direction, rank, data type and layout gives a graph cuDNN accepts, with engines.
TEST(ConvGraph, EveryDirectionRankTypeAndLayoutFinalizesWithoutADevice) {
  const int64_t live_before = live_descriptor_count();
  int built = 0;
  for (Direction dir :
       {Direction::kForward, Direction::kBackwardData, Direction::kBackwardFilter}) {
    for (int rank : {1, 2, 3}) {
      for (DataType t :
           {DataType::kFloat, DataType::kHalf, DataType::kBFloat16, DataType::kDouble}) {
        for (Layout layout : {Layout::kChannelsFirst, Layout::kChannelsLast}) {
          ConvProblem p = rank == 1 ? problem_1d(layout) : problem_2d();
          p = ConvProblem::with_data_type(p, t);
          p.direction = dir;
          p.layout = layout;
          p.spatial_dims = rank;
          if (rank == 3) {
            p.input = {5, 6, 7};
            p.filter = {3, 1, 3};
            p.pad_before = {1, 0, 0};
            p.pad_after = {0, 0, 1};
          }
          p.beta = (built % 2 == 0) ? 0.0 : 1.0;
          SCOPED_TRACE(p.to_string());
          StatusOr<ConvGraph> g = build_conv_graph(nullptr, p);
          ASSERT_TRUE(g.ok()) << g.status().to_string();
          StatusOr<int64_t> count = engine_global_count(g->graph);
          ASSERT_TRUE(count.ok()) << count.status().to_string();
          EXPECT_GT(*count, 0);
          ++built;
        }
      }
    }
  }
  EXPECT_EQ(built, 3 * 3 * 4 * 2);
  EXPECT_EQ(live_descriptor_count(), live_before);  // every graph's descriptors were destroyed
}

TEST(ConvGraph, InvalidProblemIsRefusedBeforeCuda) {
  ConvProblem p = problem_2d();
  p.groups = 3;  // does not divide c = 8
  StatusOr<ConvGraph> g = build_conv_graph(nullptr, p);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
}

// Without a handle cuDNN still finalizes some engines (for no particular device): enough to read
// notes and knob ranges in CI.
TEST(Engines, EnginesNotesAndKnobsCanBeReadWithoutADevice) {
  StatusOr<ConvGraph> g = build_conv_graph(nullptr, problem_2d());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  StatusOr<int64_t> count = engine_global_count(g->graph);
  ASSERT_TRUE(count.ok());
  int finalized = 0, refused_not_supported = 0, with_knobs = 0;
  for (int64_t id = 0; id < *count; ++id) {
    StatusOr<BackendDescriptor> e = make_engine(g->graph, id);
    if (!e.ok()) {
      if (e.status().code() == StatusCode::kNotSupported) ++refused_not_supported;
      continue;
    }
    ++finalized;
    StatusOr<int64_t> index = engine_global_index(*e);
    ASSERT_TRUE(index.ok()) << index.status().to_string();
    EXPECT_EQ(*index, id);
    StatusOr<NoteSet> notes = engine_notes(*e);
    ASSERT_TRUE(notes.ok()) << notes.status().to_string();
    StatusOr<std::vector<KnobInfo>> knobs = engine_knob_ranges(*e);
    ASSERT_TRUE(knobs.ok()) << knobs.status().to_string();
    if (!knobs->empty()) ++with_knobs;
    for (const KnobInfo& k : *knobs) {
      EXPECT_LE(k.min_value, k.max_value) << "engine " << id << " knob " << k.type;
      EXPECT_FALSE(k.name.empty());
      EXPECT_TRUE(
          std::is_sorted(knobs->begin(), knobs->end(),
                         [](const KnobInfo& a, const KnobInfo& b) { return a.type < b.type; }));
    }
  }
  EXPECT_GT(finalized, 0);
  EXPECT_GT(refused_not_supported, 0);
  EXPECT_GT(with_knobs, 0);
}

// Without a device cuDNN 9.19 counts heuristic results but writes none (their configurations do
// not finalize for "no device"), so this checks the call path and invariants; the GPU test checks
// the answers. (Depthwise problems are avoided here: cuDNN 9.19's heuristics crash with SIGFPE on
// them without a device.)
TEST(Engines, HeuristicsWithoutADeviceAnswerDistinctConfigsOfExistingEngines) {
  StatusOr<ConvGraph> g = build_conv_graph(nullptr, problem_2d());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  StatusOr<int64_t> count = engine_global_count(g->graph);
  ASSERT_TRUE(count.ok());
  StatusOr<std::vector<HeuristicResult>> results = heuristic_configs(g->graph, CUDNN_HEUR_MODE_A);
  ASSERT_TRUE(results.ok()) << results.status().to_string();
  std::set<EngineConfig> seen;
  for (const HeuristicResult& r : *results) {
    EXPECT_GE(r.config.engine_id, 0);
    EXPECT_LT(r.config.engine_id, *count);
    EXPECT_TRUE(std::is_sorted(r.config.knobs.begin(), r.config.knobs.end()));
    EXPECT_TRUE(seen.insert(r.config).second) << "repeated " << r.config.to_string();
  }
}

TEST(Engines, MakingAnEngineConfigWithAnInvalidKnobTypeFails) {
  StatusOr<ConvGraph> g = build_conv_graph(nullptr, problem_2d());
  ASSERT_TRUE(g.ok());
  StatusOr<BackendDescriptor> e = make_engine(g->graph, 0);
  if (!e.ok()) GTEST_SKIP() << "engine 0 does not finalize here: " << e.status().to_string();
  StatusOr<BackendDescriptor> config = make_engine_config(*e, {{CUDNN_KNOB_TYPE_COUNTS + 5, 1}});
  EXPECT_FALSE(config.ok());
}

TEST(Notes, NumericalNotesMapToTheirBits) {
  EXPECT_EQ(note_from_numerical(CUDNN_NUMERICAL_NOTE_TENSOR_CORE), kNoteTensorCore);
  EXPECT_EQ(note_from_numerical(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS), kNoteDownConvertInputs);
  EXPECT_EQ(note_from_numerical(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION),
            kNoteReducedPrecisionReduction);
  EXPECT_EQ(note_from_numerical(CUDNN_NUMERICAL_NOTE_FFT), kNoteFft);
  EXPECT_EQ(note_from_numerical(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC), kNoteNonDeterministic);
  EXPECT_EQ(note_from_numerical(CUDNN_NUMERICAL_NOTE_WINOGRAD), kNoteWinograd);
  EXPECT_EQ(note_from_numerical(CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4), kNoteWinogradTile4x4);
  EXPECT_EQ(note_from_numerical(CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6), kNoteWinogradTile6x6);
  EXPECT_EQ(note_from_numerical(CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13), kNoteWinogradTile13x13);
  EXPECT_EQ(note_from_numerical(CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP), 0u);
  EXPECT_EQ(note_from_numerical(static_cast<cudnnBackendNumericalNote_t>(99)), 0u);
}

TEST(Notes, BehaviourNotesMapToTheirBits) {
  EXPECT_EQ(note_from_behavior(CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION), kNoteRuntimeCompilation);
  EXPECT_EQ(note_from_behavior(CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER),
            kNoteRequiresFilterIntReorder);
  EXPECT_EQ(note_from_behavior(CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER),
            kNoteRequiresBiasIntReorder);
  EXPECT_EQ(note_from_behavior(CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API),
            kNoteSupportsCudaGraphNativeApi);
  EXPECT_EQ(note_from_behavior(CUDNN_BEHAVIOR_NOTE_CUBLASLT_DEPENDENCY), 0u);
}

TEST(Notes, TensorCoreEnginesAreRefusedForFp32WithoutTensorCores) {
  ConvProblem p = problem_2d();
  p.allow_tensor_cores = false;
  const Status s = check_notes_allowed(p, 12, kNoteTensorCore | kNoteFft);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_NE(s.message().find("engine 12"), std::string::npos) << s.message();
  EXPECT_EQ(check_notes_allowed(p, 3, kNoteDownConvertInputs).code(), StatusCode::kNotSupported);
  EXPECT_TRUE(check_notes_allowed(p, 3, kNoteFft | kNoteWinograd).ok());
  p.allow_tensor_cores = true;
  EXPECT_TRUE(check_notes_allowed(p, 12, kNoteTensorCore).ok());
  ConvProblem h = ConvProblem::with_data_type(problem_2d(), DataType::kHalf);
  h.allow_tensor_cores = false;  // only fp32 has a non-tensor-core choice
  EXPECT_TRUE(check_notes_allowed(h, 12, kNoteTensorCore).ok());
}

TEST(PointerChecks, MisalignedTensorIsNamed) {
  alignas(64) static unsigned char buf[256];
  TensorPointers t{buf, buf + 64, buf + 128};
  EXPECT_TRUE(check_pointers(t, nullptr, 0).ok());
  t.w = buf + 68;
  const Status s = check_pointers(t, nullptr, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor w"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("16-byte aligned"), std::string::npos) << s.message();
  t.w = buf + 64;
  t.y = nullptr;
  EXPECT_NE(check_pointers(t, nullptr, 0).message().find("tensor y is null"), std::string::npos);
}

TEST(PointerChecks, WorkspaceMustBeThereWhenNeededAndAligned) {
  alignas(64) static unsigned char buf[256];
  const TensorPointers t{buf, buf + 64, buf + 128};
  EXPECT_EQ(check_pointers(t, nullptr, 1024).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(check_pointers(t, buf + 192, 1024).ok());
  const Status s = check_pointers(t, buf + 193, 1024);
  EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.message();
}

// These hold only where no GPU can be used (CI); on the GPU machine they skip.
TEST(NoDevice, GpuAvailableSaysWhy) {
  const Status s = gpu_available();
  if (s.ok()) GTEST_SKIP() << "a GPU is usable here";
  EXPECT_EQ(s.code(), StatusCode::kNoDevice);
  EXPECT_NE(s.message().find("cudaGetDeviceCount"), std::string::npos) << s.message();
  EXPECT_EQ(cuda_device_count(), 0);
}

TEST(NoDevice, ContextCreationReportsNoDevice) {
  if (gpu_available().ok()) GTEST_SKIP() << "a GPU is usable here";
  StatusOr<CudnnContext> ctx = CudnnContext::create(0);
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().code(), StatusCode::kNoDevice);
}

TEST(NoDevice, BackendRefusesANullHandleWithoutTouchingCuda) {
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  EXPECT_EQ(backend->name(), "cudnn");
  StatusOr<std::vector<Candidate>> c =
      backend->candidates(nullptr, problem_2d(), CandidateSource::kAllEngines);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::unique_ptr<Plan>> plan = backend->build(nullptr, problem_2d(), EngineConfig{0, {}});
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::unique_ptr<Plan>> clone = backend->build_from_json(nullptr, problem_2d(), "{}");
  EXPECT_EQ(clone.status().code(), StatusCode::kInvalidArgument);
  EXPECT_GE(cudnn_runtime_version(), 90000);
}

}  // namespace
}  // namespace convplan::cudnn_detail
