// with_rewrites() over the scripted backend, without a GPU: which candidates it adds and how they
// are tagged, the plans it builds (config, workspace, handle, JSON), and the switches that turn
// rewrites off. Rewritten plans are not executed here: their transforms need a CUDA stream (the
// GPU tests run them).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "convplan/rewrite.h"
#include "convplan/tuner.h"
#include "support/scripted_backend.h"

namespace convplan {
namespace {

using testing::scripted_handle;
using testing::ScriptedBackend;
using testing::ScriptedEngine;

ConvProblem stem() {
  return *parse_problem("dt:bf16,layout:nhwc/mb2ic3ih32iw32oc16kh7kw7sh2sw2ph3pw3");
}

std::shared_ptr<ScriptedBackend> scripted() {
  std::vector<ScriptedEngine> engines(4);
  for (int i = 0; i < 4; ++i) {
    engines[i].id = 10 + i;
    engines[i].workspace_bytes = 1000 * i;
  }
  return std::make_shared<ScriptedBackend>(engines);
}

TEST(RewritingBackend, AddsTheInnerCandidatesOfEachRewriteTaggedAfterThePlainOnes) {
  auto backend = with_rewrites(scripted());
  auto c = backend->candidates(scripted_handle(0), stem(), CandidateSource::kHeuristicA);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::vector<std::string> texts;
  for (const Candidate& x : *c) texts.push_back(x.config.to_string());
  ASSERT_GE(texts.size(), 4u + 5u * 3u);
  EXPECT_EQ(texts[0], "eng10");
  EXPECT_EQ(texts[3], "eng13");
  EXPECT_EQ(texts[4], "s2d2+eng10");  // the best three of each rewrite, in applicable order
  EXPECT_EQ(texts[6], "s2d2+eng12");
  EXPECT_EQ(texts[7], "s2d2c8+eng10");
  EXPECT_EQ(texts.size(), 4u + 5u * 3u);  // 5 rewrites: s2d2, s2d2c8, c8, uc32, s2d2uc32
  auto fallback = backend->candidates(scripted_handle(0), stem(), CandidateSource::kFallback);
  ASSERT_TRUE(fallback.ok());
  for (const Candidate& x : *fallback) EXPECT_EQ(x.config.rewrite, "") << x.config.to_string();
}

TEST(RewritingBackend, CandidatesForRewritesAddOnlyTheNamedRewrites) {
  auto backend = with_rewrites(scripted());
  auto texts = [&](const std::vector<std::string>& names) {
    auto c = backend->candidates_for_rewrites(scripted_handle(0), stem(),
                                              CandidateSource::kHeuristicB, names);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    std::vector<std::string> out;
    for (const Candidate& x : c.ok() ? *c : std::vector<Candidate>{}) {
      out.push_back(x.config.to_string());
    }
    return out;
  };
  const std::vector<std::string> uc32{"uc32+eng10", "uc32+eng11", "uc32+eng12"};
  EXPECT_EQ(texts({"uc32", "nonesuch"}), uc32) << "the problem itself only when named \"\"";
  std::vector<std::string> with_problem{"eng10", "eng11", "eng12", "eng13"};
  with_problem.insert(with_problem.end(), uc32.begin(), uc32.end());
  EXPECT_EQ(texts({"", "uc32"}), with_problem);
}

TEST(RewritingBackend, BuildsARewrittenPlanWithScratchAfterTheInnerWorkspace) {
  auto backend = with_rewrites(scripted());
  const ConvProblem p = stem();
  auto plan = backend->build(scripted_handle(0), p, *EngineConfig::parse("s2d2+eng11"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto r = make_rewrite(p, *RewriteSpec::parse("s2d2"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*plan)->config().to_string(), "s2d2+eng11");
  EXPECT_EQ((*plan)->handle(), scripted_handle(0));
  EXPECT_EQ((*plan)->workspace_bytes(), 1024 + r->scratch_bytes());  // 1000 rounded up to 256
  // A foreign handle is refused before anything is enqueued.
  const Status s = (*plan)->execute(scripted_handle(1), {}, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kWrongHandle) << s.to_string();
}

TEST(RewritingBackend, PlanJsonRebuildsTheSameRewrittenPlan) {
  auto backend = with_rewrites(scripted());
  const ConvProblem p = stem();
  auto plan = backend->build(scripted_handle(0), p, *EngineConfig::parse("c8+eng12"));
  ASSERT_TRUE(plan.ok());
  auto json = (*plan)->to_json();
  ASSERT_TRUE(json.ok()) << json.status().to_string();
  auto again = backend->build_from_json(scripted_handle(1), p, *json);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ((*again)->config(), (*plan)->config());
  EXPECT_EQ((*again)->workspace_bytes(), (*plan)->workspace_bytes());
  // Plain plans' JSON goes to the inner backend untouched.
  auto plain = backend->build(scripted_handle(0), p, *EngineConfig::parse("eng12"));
  ASSERT_TRUE(plain.ok());
  auto plain_again = backend->build_from_json(scripted_handle(0), p, *(*plain)->to_json());
  ASSERT_TRUE(plain_again.ok()) << plain_again.status().to_string();
  EXPECT_EQ((*plain_again)->config().rewrite, "");
  auto bad = backend->build_from_json(scripted_handle(0), p, R"({"convplan_rewrite":"s2d2"})");
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruptData);
}

TEST(RewritingBackend, ARewriteThatDoesNotApplyIsNotSupportedNamingWhy) {
  auto backend = with_rewrites(scripted());
  auto plan = backend->build(scripted_handle(0), stem(), *EngineConfig::parse("s2d3+eng11"));
  EXPECT_EQ(plan.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(plan.status().message().find("block 3 does not divide stride[0]=2"), std::string::npos)
      << plan.status().message();
}

TEST(RewritingBackend, EnvironmentOffAddsNoCandidateButStillBuildsTaggedConfigs) {
  ::setenv("CONVPLAN_REWRITES", "off", 1);
  auto backend = with_rewrites(scripted());
  ::unsetenv("CONVPLAN_REWRITES");
  auto c = backend->candidates(scripted_handle(0), stem(), CandidateSource::kHeuristicA);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->size(), 4u);
  EXPECT_TRUE(backend->build(scripted_handle(0), stem(), *EngineConfig::parse("s2d2+eng11")).ok());
}

TEST(RewritingBackend, TunerFiltersRewrittenCandidatesWhenThePolicyTurnsThemOff) {
  auto backend = with_rewrites(scripted());
  TunePolicy policy;
  policy.rewrites = false;
  Tuner tuner(backend);
  auto record = tuner.tune(scripted_handle(0), stem(), policy);
  ASSERT_TRUE(record.ok()) << record.status().to_string();
  EXPECT_EQ(record->config.rewrite, "");
  int filtered = 0;
  for (const CandidateResult& c : record->candidates) {
    if (c.config.rewrite.empty()) continue;
    EXPECT_EQ(c.outcome.rfind("filtered: rewrite " + c.config.rewrite, 0), 0u) << c.outcome;
    ++filtered;
  }
  EXPECT_EQ(filtered, 5 * 3);
}

}  // namespace
}  // namespace convplan
