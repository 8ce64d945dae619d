// A rewrite in the engine configuration, the tuning record, the policy and the errata rules.
#include <gtest/gtest.h>

#include <cstdlib>

#include "convplan/rewrite.h"
#include "convplan/tune_policy.h"
#include "convplan/tuning_record.h"

namespace convplan {
namespace {

TEST(RewriteConfig, TextFormRoundTripsWithTheRewrite) {
  auto c = EngineConfig::parse("s2d2+eng62:k3=1");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rewrite, "s2d2");
  EXPECT_EQ(c->engine_id, 62);
  EXPECT_EQ(c->to_string(), "s2d2+eng62:k3=1");
  EXPECT_EQ(EngineConfig::parse("eng62")->rewrite, "");
  EXPECT_NE(*EngineConfig::parse("s2d2+eng62"), *EngineConfig::parse("eng62"));
  auto bad = EngineConfig::parse("S2D+eng1");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rewrite 'S2D'"), std::string::npos)
      << bad.status().message();
}

TEST(RewriteConfig, SpecNamesRoundTrip) {
  for (const char* name : {"s2d2", "s2d4c16", "c8", "c8k8", "k8", "s2d3k4"}) {
    auto s = RewriteSpec::parse(name);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->name(), name);
  }
  for (const char* name : {"", "s2d", "s2d1", "c1", "x2", "s2d2c16z"}) {
    EXPECT_FALSE(RewriteSpec::parse(name).ok()) << name;
  }
}

TEST(RewriteConfig, RecordJsonKeepsTheRewrite) {
  TuningRecord r;
  r.device_model = "NVIDIA H200|sm90";
  r.problem = "mb1ic3ih8iw8oc4kh3kw3sh2sw2";
  r.policy = "p";
  r.convplan_version = "0.1.0";
  r.config = *EngineConfig::parse("s2d2c8+eng7:k3=1");
  CandidateResult c;
  c.config = r.config;
  r.candidates.push_back(c);
  const std::string json = to_json(r);
  EXPECT_NE(json.find("\"rewrite\":\"s2d2c8\""), std::string::npos) << json;
  auto back = tuning_record_from_json(json);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, r);
  // A record without a rewrite keeps its old JSON: no "rewrite" member.
  r.config.rewrite.clear();
  r.candidates.clear();
  EXPECT_EQ(to_json(r).find("rewrite"), std::string::npos);
}

TEST(RewriteConfig, RecordWhoseTextDisagreesWithItsRewriteIsCorrupt) {
  TuningRecord r;
  r.device_model = "d";
  r.problem = "mb1ic3ih8iw8oc4kh3kw3";
  r.policy = "p";
  r.convplan_version = "0.1.0";
  r.config = *EngineConfig::parse("s2d2+eng7");
  std::string json = to_json(r);
  const size_t at = json.find("\"rewrite\":\"s2d2\"");
  ASSERT_NE(at, std::string::npos);
  json.replace(at, 16, "\"rewrite\":\"c8\"");
  EXPECT_FALSE(tuning_record_from_json(json).ok());
}

TEST(RewriteConfig, ErrataRuleDisablesARewrite) {
  auto rules = parse_errata_rules(
      R"({"rules":[{"id":"no-s2d2","rewrite":"s2d2"},{"id":"all","rewrite":"*","engine":9},
                   {"id":"plain","rewrite":"","engine":5}]})",
      "<text>");
  ASSERT_TRUE(rules.ok()) << rules.status().to_string();
  ConvProblem p;
  const EngineConfig s2d = *EngineConfig::parse("s2d2+eng3");
  EXPECT_TRUE((*rules)[0].matches(p, s2d));
  EXPECT_FALSE((*rules)[0].matches(p, *EngineConfig::parse("eng3")));
  EXPECT_FALSE((*rules)[0].matches(p, *EngineConfig::parse("c8+eng3")));
  EXPECT_TRUE((*rules)[1].matches(p, *EngineConfig::parse("c8+eng9")));
  EXPECT_FALSE((*rules)[1].matches(p, *EngineConfig::parse("eng9")));
  EXPECT_TRUE((*rules)[2].matches(p, *EngineConfig::parse("eng5")));
  EXPECT_FALSE((*rules)[2].matches(p, *EngineConfig::parse("c8+eng5")));
  auto bad = parse_errata_rules(R"({"rules":[{"rewrite":"S2D"}]})", "<text>");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rewrite"), std::string::npos) << bad.status().message();
}

TEST(RewriteConfig, DisabledEngineRuleMatchesTheEngineUnderEveryRewrite) {
  auto rules = parse_engine_rules("5");
  ASSERT_TRUE(rules.ok());
  EXPECT_TRUE((*rules)[0].matches(*EngineConfig::parse("s2d2+eng5")));
}

TEST(RewriteConfig, PolicyFieldAndEnvironmentAreInTheKey) {
  TunePolicy on;
  TunePolicy off;
  off.rewrites = false;
  EXPECT_NE(on.key(), off.key());
  ::setenv("CONVPLAN_REWRITES", "off", 1);
  auto env = TunePolicy::from_environment();
  ::setenv("CONVPLAN_REWRITES", "sometimes", 1);
  auto bad = TunePolicy::from_environment();
  ::unsetenv("CONVPLAN_REWRITES");
  ASSERT_TRUE(env.ok());
  EXPECT_FALSE(env->rewrites);
  EXPECT_EQ(env->key(), off.key());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("CONVPLAN_REWRITES"), std::string::npos);
}

}  // namespace
}  // namespace convplan
