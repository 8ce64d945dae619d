// The tuner on problems with post-op chains, on the scripted backend (which offers each engine
// fused and unfused, as the cuDNN backend does; its unfused plans run the epilogue's host twin):
// both kinds are timed, the faster wins once validated against the float64 reference of the chain
// (full and sampled; only finalists are validated, in order of speed), and a wrong engine is
// rejected in both kinds.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "convplan/reference.h"
#include "convplan/tuner.h"
#include "support/scripted_backend.h"

namespace convplan {
namespace {

using testing::EngineBehavior;
using testing::scripted_handle;
using testing::ScriptedBackend;
using testing::ScriptedEngine;

// Two engines; unfused runs take `unfused_ms`, fused ones `fused_ms`.
std::vector<ScriptedEngine> engines(float fused_ms, float unfused_ms) {
  std::vector<ScriptedEngine> e(2);
  for (int i = 0; i < 2; ++i) {
    e[i].id = i;
    e[i].time_for = [=](const EngineConfig& c) {
      return (c.unfused ? unfused_ms : fused_ms) + 0.5f * static_cast<float>(i);
    };
  }
  return e;
}

ConvProblem chained(const std::string& flags) {
  StatusOr<ConvProblem> p = parse_problem(flags + "/g1mb2ic4ih6iw6oc6oh6ow6kh3kw3ph1pw1");
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : ConvProblem{};
}

StatusOr<TuningRecord> tune(std::shared_ptr<ScriptedBackend> backend, const ConvProblem& p,
                            TunerOptions options = {}) {
  Tuner tuner(std::move(backend), std::move(options));
  return tuner.tune(scripted_handle(0), p, TunePolicy{});
}

TEST(PostOpsTuner, BothKindsAreTimedAndTheFasterWinsValidated) {
  for (const char* flags : {"post:bias+add+relu", "dt:bf16,layout:nhwc,post:bias+add*0.5+gelu",
                            "dt:f16,post:bias+silu", "layout:nhwc,post:add+tanh+bias"}) {
    for (bool unfused_faster : {false, true}) {
      const ConvProblem p = chained(flags);
      auto backend = std::make_shared<ScriptedBackend>(unfused_faster ? engines(2.0f, 1.0f)
                                                                      : engines(1.0f, 2.0f));
      StatusOr<TuningRecord> r = tune(backend, p);
      ASSERT_TRUE(r.ok()) << flags << ": " << r.status().to_string();
      EXPECT_EQ(r->config.unfused, unfused_faster) << flags;
      EXPECT_EQ(r->config.engine_id, 0) << flags;
      int kinds[2] = {0, 0};
      for (const CandidateResult& c : r->candidates) {
        EXPECT_FALSE(c.times_ms.empty()) << flags << " " << c.config.to_string();
        if (c.config == r->config) {  // the winner, of either kind, checked against the chain
          EXPECT_EQ(c.outcome, "ok") << flags << " " << c.config.to_string();
          EXPECT_GE(c.relative_error, 0) << c.config.to_string();
          EXPECT_LE(c.relative_error, relative_error_tolerance(p, c.notes)) << c.config.to_string();
        } else {
          EXPECT_EQ(c.outcome.rfind("not validated: slower than the choice", 0), 0u) << c.outcome;
        }
        ++kinds[c.config.unfused ? 1 : 0];
      }
      EXPECT_EQ(kinds[0], 2) << flags;
      EXPECT_EQ(kinds[1], 2) << flags;
      EXPECT_NE(r->problem.find("post:"), std::string::npos) << r->problem;
    }
  }
}

TEST(PostOpsTuner, AWrongEngineIsRejectedInBothKinds) {
  std::vector<ScriptedEngine> e = engines(1.0f, 1.0f);
  e[0].behavior = EngineBehavior::kWrongResult;  // the fastest
  for (double max_flops : {2e8, 0.0}) {          // full, then sampled reference
    TunerOptions options;
    options.reference_max_flops = max_flops;
    StatusOr<TuningRecord> r =
        tune(std::make_shared<ScriptedBackend>(e), chained("dt:bf16,post:bias+add+relu"), options);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->config.engine_id, 1);
    for (const CandidateResult& c : r->candidates) {
      if (c.config.engine_id == 0) {  // both kinds are as fast, and checked before engine 1
        EXPECT_EQ(c.outcome.rfind("rejected: relative error", 0), 0u) << c.outcome;
      } else if (c.config == r->config) {
        EXPECT_EQ(c.outcome, "ok") << c.config.to_string();
      } else {
        EXPECT_EQ(c.outcome.rfind("not validated: slower than the choice", 0), 0u) << c.outcome;
      }
    }
  }
}

// A wrong output of the unfused kind (set to zeros by the hook after the epilogue ran) is
// rejected and the slower fused kind wins.
TEST(PostOpsTuner, AWrongUnfusedOutputIsRejected) {
  TunerOptions options;
  options.after_candidate_run = [](const EngineConfig& c, void* output, size_t bytes) {
    if (c.unfused) std::fill_n(static_cast<char*>(output), bytes, char{0});
  };
  StatusOr<TuningRecord> r = tune(std::make_shared<ScriptedBackend>(engines(2.0f, 1.0f)),
                                  chained("post:bias+add+sigmoid"), options);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->config.unfused);
  for (const CandidateResult& c : r->candidates) {
    if (c.config.unfused) {
      EXPECT_EQ(c.outcome.rfind("rejected", 0), 0u) << c.outcome;
    }
  }
}

}  // namespace
}  // namespace convplan
