// The tuner's cost controls for candidates compiled at run time (issue 21), on the scripted backend
// (whose runtime-compiled builds sleep 10x the build delay):
// - the exhaustive search of a chained problem finishes within its budget (the regression: a
//   fused engine compiled at run time, whose index also names a precompiled unfused engine, got
//   64 knob variants timed as precompiled, and the budget applied only once a candidate was timed);
// - the compile pool builds runtime-compiled candidates on handles of its own and clones them onto
//   the tune's handle, with the same choice for any thread count, and a failed build dropped alone;
// - limited mode's rules: at most kMaxRuntimeCompiledLimited compiled per problem, in waves, and
//   no wave after one that did not improve.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "convplan/tuner.h"
#include "support/scripted_backend.h"

namespace convplan {
namespace {

using testing::EngineBehavior;
using ::testing::HasSubstr;
using testing::scripted_handle;
using testing::ScriptedBackend;
using testing::ScriptedEngine;
using ::testing::StartsWith;

// Mirrors of the tuner's constants (tuner.cc), named here so that a change shows in review.
constexpr size_t kMaxKnobCombinationsPerRuntimeCompiledEngine = 8;
constexpr size_t kMaxRuntimeCompiledLimited = 8;
constexpr size_t kCompileWave = 4;

ConvProblem problem(const std::string& chain = "") {
  const std::string text =
      (chain.empty() ? "" : "post:" + chain + "/") + "g1mb2ic4ih6iw6oc6oh6ow6kh3kw3ph1pw1";
  StatusOr<ConvProblem> p = parse_problem(text);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : ConvProblem{};
}

// A precompiled engine 0 of `precompiled_ms`, then `n` runtime-compiled engines 1..n in rank order
// whose times come from `ms_of(i)`.
std::vector<ScriptedEngine> compiled_engines(float precompiled_ms, int n,
                                             const std::function<float(int)>& ms_of) {
  std::vector<ScriptedEngine> e(static_cast<size_t>(n) + 1);
  e[0].id = 0;
  e[0].time_ms = precompiled_ms;
  for (int i = 1; i <= n; ++i) {
    e[i].id = i;
    e[i].notes = kNoteRuntimeCompilation;
    e[i].time_ms = ms_of(i);
    // Limited mode times the first 8 of each heuristics list: those past them come from mode B,
    // so that all n are within the limited search and only the compile pool's rules limit it.
    e[i].only_in_heuristic_b = i >= 8;
  }
  return e;
}

size_t count_outcomes(const TuningRecord& r, const std::string& prefix) {
  size_t n = 0;
  for (const CandidateResult& c : r.candidates) n += c.outcome.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

StatusOr<TuningRecord> tune(const std::shared_ptr<ScriptedBackend>& backend, const ConvProblem& p,
                            const TunePolicy& policy) {
  Tuner tuner(backend);
  return tuner.tune(scripted_handle(0), p, policy);
}

// ---- The regression: exhaustive tuning of a chained problem never finished ----

TEST(CompilePool, ExhaustiveChainedProblemWithAFusedRuntimeCompiledEngineFinishes) {
  std::vector<ScriptedEngine> e(2);
  e[0].id = 0;  // the heuristics' engine, precompiled in both kinds
  e[0].time_ms = 1.0f;
  e[1].id = 49;  // fused: compiled at run time, with a large knob product; unfused: precompiled
  e[1].notes = kNoteRuntimeCompilation;
  e[1].unfused_notes = NoteSet{0};
  e[1].in_heuristics = false;
  e[1].knobs = {KnobInfo{3, "SPLIT_K_SLC", 0, 15, 1, 0}, KnobInfo{5, "TILE", 0, 9, 1, 0},
                KnobInfo{7, "STAGES", 1, 8, 1, 1}};
  e[1].time_ms = 2.0f;
  auto backend = std::make_shared<ScriptedBackend>(e);
  backend->set_build_delay_us(2000);  // 20 ms a runtime compilation, 2 ms otherwise
  TunePolicy policy;
  policy.mode = TuneMode::kExhaustive;
  policy.budget_ms = 300;
  policy.compile_threads = 1;
  const ConvProblem p = problem("bias+relu");
  auto r = tune(backend, p, policy);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_LT(r->tuning_ms, 3 * policy.budget_ms);
  // The fused engine's variants are known as compiled at run time, and capped.
  size_t fused49 = 0, unfused49 = 0;
  for (const CandidateResult& c : r->candidates) {
    if (c.config.engine_id != 49) continue;
    if (c.config.unfused) {
      ++unfused49;
      EXPECT_EQ(c.notes & kNoteRuntimeCompilation, 0) << c.config.to_string();
    } else {
      ++fused49;
      EXPECT_NE(c.notes & kNoteRuntimeCompilation, 0) << c.config.to_string();
    }
  }
  EXPECT_LE(fused49, kMaxKnobCombinationsPerRuntimeCompiledEngine + 1);  // + the bare listing
  EXPECT_GT(unfused49, 1u);  // the unfused engine gets knob variants of its own
  EXPECT_LE(backend->runtime_compilations.load(),
            static_cast<int64_t>(kMaxKnobCombinationsPerRuntimeCompiledEngine + 1));
}

TEST(CompilePool, ExhaustiveBudgetAppliesBeforeAnyCandidateIsTimed) {
  std::vector<ScriptedEngine> e(2);
  e[0].id = 0;  // the heuristics' only engine fails to execute: nothing is ever timed from it
  e[0].behavior = EngineBehavior::kFailsToExecute;
  e[1].id = 7;  // the exhaustive list: 17 knob variants (16 values and the default), 20 ms each
  e[1].in_heuristics = false;
  e[1].knobs = {KnobInfo{1, "k1", 0, 39, 1, 0}};
  auto backend = std::make_shared<ScriptedBackend>(e);
  backend->set_build_delay_us(20000);
  TunePolicy policy;
  policy.mode = TuneMode::kExhaustive;
  policy.budget_ms = 5;  // spent while engine 0 builds
  policy.verbose = 1;
  ::testing::internal::CaptureStderr();
  auto r = tune(backend, problem(), policy);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->config.engine_id, 7);     // the last resort: the first variant that passes
  EXPECT_LT(backend->builds.load(), 5);  // not all 17
  EXPECT_THAT(err, HasSubstr("before a candidate passed"));
  EXPECT_GT(count_outcomes(*r, "not tried: an earlier candidate passed"), 12u);
}

TEST(CompilePool, VerboseTwoNamesEachEnginesKnobVariantsAndEachCompileWave) {
  auto e = compiled_engines(1.0f, 3, [](int i) { return 0.5f / static_cast<float>(i); });
  e[1].knobs = {KnobInfo{1, "k1", 0, 3, 1, 0}};
  auto backend = std::make_shared<ScriptedBackend>(e);
  TunePolicy policy;
  policy.mode = TuneMode::kExhaustive;
  policy.compile_threads = 2;
  policy.verbose = 2;
  ::testing::internal::CaptureStderr();
  auto r = tune(backend, problem(), policy);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_THAT(err, HasSubstr("engine 1 (compiled at run time): 3 knob combinations added"));
  EXPECT_THAT(err, HasSubstr("runtime-compiled candidates on 2 threads"));
  EXPECT_THAT(err, ::testing::ContainsRegex("compile [0-9.e+-]+, checks"));
}

// ---- The compile pool ----

TEST(CompilePool, BuildsOnHandlesOfItsOwnAndClonesOntoTheTunesHandle) {
  auto e = compiled_engines(1.0f, 4, [](int i) { return 0.9f - 0.1f * static_cast<float>(i); });
  auto backend = std::make_shared<ScriptedBackend>(e);
  TunePolicy policy;
  policy.compile_threads = 4;
  auto r = tune(backend, problem(), policy);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->config.engine_id, 4);
  EXPECT_GE(backend->created_handles.load(), 2);
  EXPECT_EQ(backend->live_handles.load(), 0);  // the Tuner released its pool
  EXPECT_EQ(backend->json_builds.load(), 4);   // each compiled plan cloned onto handle 0
  EXPECT_EQ(backend->runtime_compilations.load(), 4);
  EXPECT_EQ(backend->foreign_handle_executions.load(), 0);
  EXPECT_EQ(r->plan_json, "scripted:eng4");
}

TEST(CompilePool, OneThreadBuildsEachInTurnOnTheTunesHandle) {
  auto e = compiled_engines(1.0f, 4, [](int i) { return 0.9f - 0.1f * static_cast<float>(i); });
  auto backend = std::make_shared<ScriptedBackend>(e);
  TunePolicy policy;
  policy.compile_threads = 1;
  auto r = tune(backend, problem(), policy);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->config.engine_id, 4);
  EXPECT_EQ(backend->created_handles.load(), 0);
  EXPECT_EQ(backend->json_builds.load(), 0);
}

TEST(CompilePool, AFailedCompileDropsThatCandidateAlone) {
  auto e = compiled_engines(1.0f, 4, [](int i) { return 0.9f - 0.1f * static_cast<float>(i); });
  e[4].behavior = EngineBehavior::kFailsToBuild;  // the fastest cannot be built
  auto backend = std::make_shared<ScriptedBackend>(e);
  TunePolicy policy;
  policy.compile_threads = 3;
  auto r = tune(backend, problem(), policy);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->config.engine_id, 3);
  for (const CandidateResult& c : r->candidates) {
    if (c.config.engine_id == 4) {
      EXPECT_THAT(c.outcome, StartsWith("failed to build: "));
    }
  }
}

TEST(CompilePool, TheChoiceAndEveryOutcomeAreTheSameForAnyThreadCount) {
  auto e =
      compiled_engines(2.0f, 7, [](int i) { return 1.0f + 0.13f * static_cast<float>(i % 4); });
  e[2].behavior = EngineBehavior::kWrongResult;
  e[5].behavior = EngineBehavior::kFailsToBuild;
  std::vector<std::string> first;
  EngineConfig first_choice;
  for (int threads : {1, 2, 3, 4, 8}) {
    auto backend = std::make_shared<ScriptedBackend>(e);
    TunePolicy policy;
    policy.compile_threads = threads;
    auto r = tune(backend, problem(), policy);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    std::vector<std::string> outcomes;
    for (const CandidateResult& c : r->candidates) {
      outcomes.push_back(c.config.to_string() + ": " + c.outcome.substr(0, c.outcome.find('(')));
    }
    if (threads == 1) {
      first = outcomes;
      first_choice = r->config;
      continue;
    }
    EXPECT_EQ(r->config, first_choice) << threads << " threads";
    EXPECT_EQ(outcomes, first) << threads << " threads";
  }
}

TEST(CompilePool, ThreadsTuningAtOnceShareThePool) {
  auto e = compiled_engines(1.0f, 5, [](int i) { return 0.9f - 0.1f * static_cast<float>(i); });
  auto backend = std::make_shared<ScriptedBackend>(e);
  backend->set_build_delay_us(200);
  Tuner tuner(backend);
  TunePolicy policy;
  policy.compile_threads = 3;
  constexpr int kThreads = 4;
  std::vector<StatusOr<TuningRecord>> results(kThreads, Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ConvProblem p = problem();
      p.k = 2 + t;
      results[t] = tuner.tune(scripted_handle(t), p, policy);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->config.engine_id, 5);
  }
  EXPECT_EQ(backend->foreign_handle_executions.load(), 0);
  EXPECT_EQ(backend->concurrent_handle_uses.load(), 0);
}

TEST(CompilePool, CompileThreadsComeFromTheEnvironment) {
  ::setenv("CONVPLAN_COMPILE_THREADS", "3", 1);
  auto p = TunePolicy::from_environment();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->compile_threads, 3);
  ::setenv("CONVPLAN_COMPILE_THREADS", "-1", 1);
  auto bad = TunePolicy::from_environment();
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("CONVPLAN_COMPILE_THREADS"));
  ::unsetenv("CONVPLAN_COMPILE_THREADS");
  TunePolicy two;
  two.compile_threads = 2;
  EXPECT_EQ(TunePolicy{}.key(), two.key());  // not in the key: it never changes the choice
}

// ---- Limited mode's rules ----

TEST(CompilePool, LimitedModeCompilesAtMostItsCapPerProblem) {
  // Each runtime-compiled engine is faster than the one before: every wave improves.
  auto e = compiled_engines(1.0f, 12, [](int i) { return 0.9f - 0.05f * static_cast<float>(i); });
  auto backend = std::make_shared<ScriptedBackend>(e);
  auto r = tune(backend, problem(), TunePolicy{});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(backend->runtime_compilations.load(), static_cast<int64_t>(kMaxRuntimeCompiledLimited));
  EXPECT_EQ(r->config.engine_id, static_cast<int64_t>(kMaxRuntimeCompiledLimited));
  EXPECT_EQ(count_outcomes(*r, "not tried: limited mode compiles at most 8"), 12u - 8u);
}

TEST(CompilePool, LimitedModeStopsAfterAWaveThatDidNotImprove) {
  auto e = compiled_engines(1.0f, 10, [](int) { return 1.5f; });  // all slower than precompiled
  auto backend = std::make_shared<ScriptedBackend>(e);
  auto r = tune(backend, problem(), TunePolicy{});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->config.engine_id, 0);
  EXPECT_EQ(backend->runtime_compilations.load(), static_cast<int64_t>(kCompileWave));
  EXPECT_EQ(
      count_outcomes(*r, "not tried: a wave of 4 runtime-compiled candidates did not improve"),
      10u - kCompileWave);
}

TEST(CompilePool, LimitedModeGoesOnWhileWavesImprove) {
  // The second wave holds the fastest: it is compiled because the first wave improved.
  auto e = compiled_engines(1.0f, 8, [](int i) { return i == 7 ? 0.3f : 0.8f; });
  auto backend = std::make_shared<ScriptedBackend>(e);
  auto r = tune(backend, problem(), TunePolicy{});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->config.engine_id, 7);
}

// A knob combination is not compiled in the wave of its engine's default configuration: it waits
// for the default's time, and is not compiled at all when that was far behind the best (engine
// 69's split-K combinations, compiled blind beside its default, never finished; issue 21).
TEST(CompilePool, KnobCombinationsWaitForTheirEnginesDefaultTime) {
  // Engine 1 (3 ms, far behind engine 2's 0.9) and engine 2 fill half a wave; engine 1's three
  // combinations would have filled the rest.
  auto e = compiled_engines(1.0f, 2, [](int i) { return i == 1 ? 3.0f : 0.9f; });
  e[1].knobs = {KnobInfo{17, "k17", 0, 3, 1, 0}};
  auto backend = std::make_shared<ScriptedBackend>(e);
  TunePolicy policy;
  policy.mode = TuneMode::kExhaustive;
  policy.compile_threads = 4;
  auto r = tune(backend, problem(), policy);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->config.engine_id, 2);
  EXPECT_EQ(backend->runtime_compilations.load(), 2) << "the two defaults alone";
  EXPECT_EQ(count_outcomes(*r, "not tried: a knob combination of engine 1, whose best"), 3u);

  // Near the best, the combinations are compiled after their default, in a wave of their own.
  e[1].time_ms = 1.0f;
  backend = std::make_shared<ScriptedBackend>(e);
  r = tune(backend, problem(), policy);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(backend->runtime_compilations.load(), 5);
  EXPECT_EQ(count_outcomes(*r, "not tried"), 0u);
}

TEST(CompilePool, ExhaustiveModeHasNoCapAndNoWaveStop) {
  auto e = compiled_engines(1.0f, 10, [](int) { return 1.5f; });
  auto backend = std::make_shared<ScriptedBackend>(e);
  TunePolicy policy;
  policy.mode = TuneMode::kExhaustive;
  auto r = tune(backend, problem(), policy);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(backend->runtime_compilations.load(), 10);
}

}  // namespace
}  // namespace convplan
