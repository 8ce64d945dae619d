// TunePolicy: modes, engine rules, errata rules, the CONVPLAN_* variables and the policy key.
#include "convplan/tune_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace convplan {
namespace {

using ::testing::HasSubstr;

// Sets (or unsets, with nullopt) environment variables for one test and restores them after.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) {
      if (old) {
        setenv(name.c_str(), old->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  void set(const std::string& name, std::optional<std::string> value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// A fixture whose environment starts with no CONVPLAN_* variable set.
class PolicyEnvTest : public ::testing::Test {
 protected:
  PolicyEnvTest() {
    for (const char* v : kTunePolicyVariables) env_.set(v, std::nullopt);
  }
  StatusOr<TunePolicy> read(const std::string& name, const std::string& value) {
    env_.set(name, value);
    return TunePolicy::from_environment();
  }
  // The error from_environment gives for name=value, which must be kInvalidArgument naming the
  // variable and the value.
  std::string error_for(const std::string& name, const std::string& value) {
    auto p = read(name, value);
    env_.set(name, std::nullopt);  // so that the next variable is read alone
    EXPECT_FALSE(p.ok()) << name << "='" << value << "' was accepted";
    if (p.ok()) return "";
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(p.status().message(), HasSubstr(name + "='" + value + "'"));
    return p.status().message();
  }
  ScopedEnv env_;
};

std::string write_temp(const std::string& text) {
  char path[] = "/tmp/convplan_errata_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

EngineConfig config(int64_t id, std::vector<KnobChoice> knobs = {}) {
  EngineConfig c;
  c.engine_id = id;
  c.knobs = std::move(knobs);
  return c;
}

// ---- Modes ----

TEST(TuneModeTest, RoundTripsThroughText) {
  for (TuneMode m : {TuneMode::kHeuristic, TuneMode::kLimited, TuneMode::kExhaustive}) {
    auto parsed = parse_tune_mode(to_string(m));
    ASSERT_TRUE(parsed.ok()) << to_string(m);
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_STREQ(to_string(TuneMode::kLimited), "limited");
}

TEST(TuneModeTest, UnknownModeIsRejectedByName) {
  auto m = parse_tune_mode("fastest");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("'fastest'"));
}

// ---- Engine rules ----

TEST(EngineRulesTest, ParsesSemicolonAndWhitespaceSeparatedRules) {
  auto rules = parse_engine_rules("5;7:k3=1,k10=0  12\t;13");
  ASSERT_TRUE(rules.ok()) << rules.status().to_string();
  ASSERT_EQ(rules->size(), 4u);
  EXPECT_EQ((*rules)[0], (EngineRule{5, {}}));
  EXPECT_EQ((*rules)[1], (EngineRule{7, {{3, 1}, {10, 0}}}));
  EXPECT_EQ((*rules)[2], (EngineRule{12, {}}));
  EXPECT_EQ((*rules)[3], (EngineRule{13, {}}));
}

TEST(EngineRulesTest, KnobsAreSortedByType) {
  auto rules = parse_engine_rules("7:k10=0,k3=1");
  ASSERT_TRUE(rules.ok());
  EXPECT_EQ((*rules)[0], (EngineRule{7, {{3, 1}, {10, 0}}}));
}

TEST(EngineRulesTest, EmptyTextGivesNoRules) {
  for (const char* text : {"", " ", ";;", " ; \t"}) {
    auto rules = parse_engine_rules(text);
    ASSERT_TRUE(rules.ok()) << "'" << text << "'";
    EXPECT_TRUE(rules->empty());
  }
}

TEST(EngineRulesTest, ErrorsNameTheRuleAndItsPosition) {
  struct Case {
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {"5;x7", "at 2 ('x7'): not an engine index"},
      {"5;-3", "at 2 ('-3'): engine index must be >= 0"},
      {"12 7:", "at 3 ('7:'): ':' must be followed by knob choices"},
      {"7:k3", "at 0 ('7:k3'): 'k3' is not a knob choice k<type>=<value>"},
      {"7:k3=1,x", "at 0 ('7:k3=1,x'): 'x' is not a knob choice"},
      {"1;2;7:k3=1,k3=2", "at 4 ('7:k3=1,k3=2'): knob type 3 is repeated"},
      {"5.5", "at 0 ('5.5'): not an engine index"},
  };
  for (const Case& c : cases) {
    auto rules = parse_engine_rules(c.text);
    ASSERT_FALSE(rules.ok()) << c.text;
    EXPECT_EQ(rules.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(rules.status().message(), HasSubstr(c.expected)) << c.text;
  }
}

TEST(EngineRulesTest, RuleMatchesItsEngineAndKnobSubset) {
  const EngineRule any{5, {}};
  EXPECT_TRUE(any.matches(config(5)));
  EXPECT_TRUE(any.matches(config(5, {{3, 1}})));
  EXPECT_FALSE(any.matches(config(6)));

  const EngineRule knobbed{7, {{3, 1}}};
  EXPECT_TRUE(knobbed.matches(config(7, {{3, 1}, {10, 2}})));
  EXPECT_FALSE(knobbed.matches(config(7, {{3, 2}, {10, 2}})));
  EXPECT_FALSE(knobbed.matches(config(7)));
  EXPECT_FALSE(knobbed.matches(config(8, {{3, 1}})));
}

TEST(EngineRulesTest, DisabledForPicksTheDirectionsList) {
  TunePolicy p;
  p.disabled_fwd = {{1, {}}};
  p.disabled_bwd_data = {{2, {}}};
  p.disabled_bwd_filter = {{3, {}}};
  EXPECT_EQ(p.disabled_for(Direction::kForward), p.disabled_fwd);
  EXPECT_EQ(p.disabled_for(Direction::kBackwardData), p.disabled_bwd_data);
  EXPECT_EQ(p.disabled_for(Direction::kBackwardFilter), p.disabled_bwd_filter);
}

// ---- Errata rules ----

ConvProblem errata_problem() {
  ConvProblem p;
  p.direction = Direction::kForward;
  p.n = 8;
  p.c = 64;
  p.k = 128;
  p.input = {56, 56, 1};
  p.filter = {3, 3, 1};
  p.pad_before = {1, 1, 0};
  p.pad_after = {1, 1, 0};
  p = ConvProblem::with_data_type(p, DataType::kBFloat16);
  return p;
}

TEST(ErrataTest, ParsesEveryField) {
  auto rules = parse_errata_rules(R"({"rules":[
      {"id":"bad-split","direction":"fwd","data_type":"bf16","engine":5,"knobs":{"3":1,"SWIZZLE":0},
       "shape":{"c":[1,64],"k":[64,null],"filter0":3}}]})",
                                  "<text>");
  ASSERT_TRUE(rules.ok()) << rules.status().to_string();
  ASSERT_EQ(rules->size(), 1u);
  const ErrataRule& r = (*rules)[0];
  EXPECT_EQ(r.id, "bad-split");
  EXPECT_EQ(r.direction, Direction::kForward);
  EXPECT_EQ(r.data_type, DataType::kBFloat16);
  EXPECT_EQ(r.engine_id, 5);
  // SWIZZLE is knob type 1.
  EXPECT_EQ(r.knobs, (std::vector<KnobChoice>{{1, 0}, {3, 1}}));
  ASSERT_EQ(r.ranges.size(), 3u);
  EXPECT_EQ(r.ranges[0], (ErrataRule::Range{"c", 1, 64}));
  EXPECT_EQ(r.ranges[1], (ErrataRule::Range{"filter0", 3, 3}));
  EXPECT_EQ(r.ranges[2], (ErrataRule::Range{"k", 64, -1}));
}

TEST(ErrataTest, RuleMatchesOnlyWhenEveryFieldMatches) {
  auto rules = parse_errata_rules(
      R"({"rules":[{"direction":"fwd","data_type":"bf16","engine":5,"knobs":{"3":1},
                    "shape":{"c":[1,64],"k":[64,null],"input1":[50,60]}}]})",
      "<text>");
  ASSERT_TRUE(rules.ok()) << rules.status().to_string();
  const ErrataRule& r = (*rules)[0];
  const ConvProblem p = errata_problem();
  const EngineConfig hit = config(5, {{3, 1}, {10, 0}});
  EXPECT_TRUE(r.matches(p, hit));
  EXPECT_FALSE(r.matches(p, config(5, {{3, 2}})));  // knob value
  EXPECT_FALSE(r.matches(p, config(6, {{3, 1}})));  // engine
  ConvProblem other = p;
  other.direction = Direction::kBackwardData;
  EXPECT_FALSE(r.matches(other, hit));
  other = ConvProblem::with_data_type(p, DataType::kHalf);
  EXPECT_FALSE(r.matches(other, hit));
  other = p;
  other.c = 128;  // above the c range
  EXPECT_FALSE(r.matches(other, hit));
  other = p;
  other.k = 32;  // below the k range
  EXPECT_FALSE(r.matches(other, hit));
  other = p;
  other.k = 4096;  // no upper bound on k
  EXPECT_TRUE(r.matches(other, hit));
  other = p;
  other.input[1] = 28;
  EXPECT_FALSE(r.matches(other, hit));
}

TEST(ErrataTest, RuleWithoutConditionsMatchesEverything) {
  auto rules = parse_errata_rules(R"({"rules":[{"id":"all"}]})", "<text>");
  ASSERT_TRUE(rules.ok());
  EXPECT_TRUE((*rules)[0].matches(errata_problem(), config(3)));
}

TEST(ErrataTest, ErrorsNameTheSourceRuleIndexAndField) {
  struct Case {
    const char* json;
    const char* expected;
  };
  const Case cases[] = {
      {R"({"rules":[{"id":"a"},{"engine":1,"colour":"red"}]})",
       "rule 1 field 'colour': unknown field"},
      {R"({"rules":[{"direction":"sideways"}]})", "rule 0 field 'direction'"},
      {R"({"rules":[{"data_type":"f8"}]})", "rule 0 field 'data_type'"},
      {R"({"rules":[{"engine":-2}]})", "rule 0 field 'engine': must be an engine index >= 0"},
      {R"({"rules":[{"engine":"5"}]})", "rule 0 field 'engine'"},
      {R"({"rules":[{"knobs":{"NOT_A_KNOB":1}}]})",
       "rule 0 field 'knobs.NOT_A_KNOB': not a knob type"},
      {R"({"rules":[{"knobs":{"3":"one"}}]})", "rule 0 field 'knobs.3': value must be an integer"},
      {R"({"rules":[{"shape":{"height":[1,2]}}]})",
       "rule 0 field 'shape.height': unknown shape field"},
      {R"({"rules":[{"shape":{"c":[9,2]}}]})", "rule 0 field 'shape.c': min > max"},
      {R"({"rules":[{"shape":{"c":[1,2,3]}}]})",
       "rule 0 field 'shape.c': must be an integer or [min, max]"},
      {R"({"rules":[{"shape":{"input3":1}}]})", "rule 0 field 'shape.input3'"},
      {R"({"rules":[7]})", "rule 0: must be a JSON object"},
      {R"({"rules":[], "version":2})", "unknown top-level field 'version'"},
      {R"({"rules":{}})", "field 'rules' must be an array"},
      {R"([])", "must be an object"},
      {R"({"rules":[)", "not JSON"},
  };
  for (const Case& c : cases) {
    auto rules = parse_errata_rules(c.json, "my.json");
    ASSERT_FALSE(rules.ok()) << c.json;
    EXPECT_EQ(rules.status().code(), StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(rules.status().message(), HasSubstr("errata my.json")) << c.json;
    EXPECT_THAT(rules.status().message(), HasSubstr(c.expected)) << c.json;
  }
}

// The rules of faults convplan has seen match the problem they faulted on and spare its rewrites
// (which pad the channels) and problems with more channels.
TEST(ErrataTest, KnownFaultRulesMatchWhereTheFaultWasSeen) {
  auto seen =
      parse_problem("dt:bf16,layout:nhwc/g1mb2ic4id64ih64iw64oc32od64oh64ow64kd3kh3kw3pd1ph1pw1");
  ASSERT_TRUE(seen.ok()) << seen.status().to_string();
  const std::vector<ErrataRule>& rules = known_fault_rules();
  auto any_matches = [&](const ConvProblem& p, const EngineConfig& c) {
    return std::any_of(rules.begin(), rules.end(),
                       [&](const ErrataRule& r) { return r.matches(p, c); });
  };
  EXPECT_TRUE(any_matches(*seen, EngineConfig{71, {}}));
  EXPECT_TRUE(any_matches(*seen, EngineConfig{71, {{17, 9}}})) << "every knob choice";
  EngineConfig padded{71, {}};
  padded.rewrite = "uc32";
  EXPECT_FALSE(any_matches(*seen, padded));
  EXPECT_FALSE(any_matches(*seen, EngineConfig{72, {}}));
  ConvProblem wide = *seen;
  wide.c = 8;
  EXPECT_FALSE(any_matches(wide, EngineConfig{71, {}}));
  // Few output channels too: the U-Net's head (32 to 4 channels) faulted as well.
  auto head = parse_problem("dt:bf16,layout:nhwc/g1mb2ic32id64ih64iw64oc4od64oh64ow64kd1kh1kw1");
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  EXPECT_TRUE(any_matches(*head, EngineConfig{71, {}}));
  head->k = 8;
  EXPECT_FALSE(any_matches(*head, EngineConfig{71, {}}));

  // Engine 77 on backward-data, every configuration and shape; only there.
  auto dgrad = parse_problem(
      "dir:bwd_data,dt:bf16,layout:nhwc/g1mb256ic64ih56iw56oc64oh56ow56kh1kw1sh1sw1ph0pw0");
  ASSERT_TRUE(dgrad.ok()) << dgrad.status().to_string();
  EXPECT_TRUE(any_matches(*dgrad, EngineConfig{77, {}}));
  EXPECT_TRUE(any_matches(*dgrad, EngineConfig{77, {{17, 9}, {24, 0}}}));
  ConvProblem wgrad = *dgrad;
  wgrad.direction = Direction::kBackwardFilter;
  EXPECT_FALSE(any_matches(wgrad, EngineConfig{77, {}}));
  EXPECT_FALSE(any_matches(*dgrad, EngineConfig{78, {}}));

  // Engine 1 on backward-filter rewritten by s2d2, and by s2d2c8 (faulted there too) or any other
  // rewrite; not plain, not another direction.
  auto stem = parse_problem(
      "dir:bwd_filter,dt:bf16,layout:nhwc/g1mb256ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3");
  ASSERT_TRUE(stem.ok()) << stem.status().to_string();
  EngineConfig s2d2{1, {}};
  s2d2.rewrite = "s2d2";
  EXPECT_TRUE(any_matches(*stem, s2d2));
  EXPECT_FALSE(any_matches(*stem, EngineConfig{1, {}}));
  EngineConfig padded_s2d2 = s2d2;
  padded_s2d2.rewrite = "s2d2c8";
  EXPECT_TRUE(any_matches(*stem, padded_s2d2));
  ConvProblem stem_fwd = *stem;
  stem_fwd.direction = Direction::kForward;
  EXPECT_FALSE(any_matches(stem_fwd, s2d2));

  // Engine 69's split-K slices on backward-filter, any shape; not its default configuration, not
  // engine 70's slices (they ran), not another direction.
  for (int64_t slices : {9, 17, 26})
    EXPECT_TRUE(any_matches(wgrad, EngineConfig{69, {{17, slices}, {24, 0}}})) << slices;
  EXPECT_TRUE(any_matches(*stem, EngineConfig{69, {{17, 9}}}));
  EXPECT_FALSE(any_matches(wgrad, EngineConfig{69, {}}));
  EXPECT_FALSE(any_matches(wgrad, EngineConfig{70, {{17, 9}, {24, 0}}}));
  EXPECT_FALSE(any_matches(*dgrad, EngineConfig{69, {{17, 9}, {24, 0}}}));
}

TEST(ErrataTest, LoadsRulesFromAFile) {
  const std::string path = write_temp(R"({"rules":[{"id":"x","engine":4}]})");
  auto rules = load_errata_file(path);
  std::remove(path.c_str());
  ASSERT_TRUE(rules.ok()) << rules.status().to_string();
  ASSERT_EQ(rules->size(), 1u);
  EXPECT_EQ((*rules)[0].engine_id, 4);
}

TEST(ErrataTest, FileErrorsNameThePath) {
  auto missing = load_errata_file("/nonexistent/dir/errata.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/dir/errata.json"));

  const std::string path = write_temp(R"({"rules":[{"engin":4}]})");
  auto bad = load_errata_file(path);
  std::remove(path.c_str());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(path));
  EXPECT_THAT(bad.status().message(), HasSubstr("rule 0 field 'engin'"));
}

// ---- The environment ----

TEST_F(PolicyEnvTest, UnsetVariablesKeepTheBase) {
  TunePolicy base;
  base.mode = TuneMode::kExhaustive;
  base.disabled_fwd = {{3, {}}};
  base.workspace_limit = 12345;
  base.verbose = 1;
  auto p = TunePolicy::from_environment(base);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(*p, base);
  auto defaults = TunePolicy::from_environment();
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(*defaults, TunePolicy{});
}

TEST_F(PolicyEnvTest, ReadsTheMode) {
  auto p = read("CONVPLAN_TUNE", "exhaustive");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->mode, TuneMode::kExhaustive);
  EXPECT_THAT(error_for("CONVPLAN_TUNE", "quick"), HasSubstr("heuristic, limited, exhaustive"));
  error_for("CONVPLAN_TUNE", "");
}

TEST_F(PolicyEnvTest, ReadsTheDisabledEngineListsOfEachDirection) {
  env_.set("CONVPLAN_DISABLED_FWD_ENGINES", "5;7:k3=1");
  env_.set("CONVPLAN_DISABLED_BWD_DATA_ENGINES", "8");
  env_.set("CONVPLAN_DISABLED_BWD_FILTER_ENGINES", "9 10");
  auto p = TunePolicy::from_environment();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->disabled_fwd, (std::vector<EngineRule>{{5, {}}, {7, {{3, 1}}}}));
  EXPECT_EQ(p->disabled_bwd_data, (std::vector<EngineRule>{{8, {}}}));
  EXPECT_EQ(p->disabled_bwd_filter, (std::vector<EngineRule>{{9, {}}, {10, {}}}));
}

TEST_F(PolicyEnvTest, MalformedEngineListNamesVariableValueAndRule) {
  EXPECT_EQ(error_for("CONVPLAN_DISABLED_FWD_ENGINES", "5;x7"),
            "CONVPLAN_DISABLED_FWD_ENGINES='5;x7': at 2 ('x7'): not an engine index");
  EXPECT_THAT(error_for("CONVPLAN_DISABLED_BWD_DATA_ENGINES", "1,2"), HasSubstr("('1,2')"));
  EXPECT_THAT(error_for("CONVPLAN_DISABLED_BWD_FILTER_ENGINES", "3:k1"), HasSubstr("'k1'"));
}

TEST_F(PolicyEnvTest, EmptyEngineListClearsTheBase) {
  env_.set("CONVPLAN_DISABLED_FWD_ENGINES", "");
  TunePolicy base;
  base.disabled_fwd = {{3, {}}};
  auto p = TunePolicy::from_environment(base);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->disabled_fwd.empty());
}

TEST_F(PolicyEnvTest, ReadsTheErrataFile) {
  const std::string path = write_temp(R"({"rules":[{"id":"r","engine":2,"data_type":"f16"}]})");
  auto p = read("CONVPLAN_ERRATA_FILE", path);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->errata.size(), 1u);
  EXPECT_EQ(p->errata[0].id, "r");
  EXPECT_EQ(p->errata[0].data_type, DataType::kHalf);

  std::ofstream(path) << R"({"rules":[{"id":"r","enigne":2}]})";
  EXPECT_THAT(error_for("CONVPLAN_ERRATA_FILE", path), HasSubstr("rule 0 field 'enigne'"));
  std::remove(path.c_str());
  EXPECT_THAT(error_for("CONVPLAN_ERRATA_FILE", path), HasSubstr("cannot open errata file"));
  error_for("CONVPLAN_ERRATA_FILE", "");
}

TEST_F(PolicyEnvTest, ReadsForbiddenNotes) {
  auto p = read("CONVPLAN_FORBIDDEN_NOTES", "fft,winograd");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->forbidden_notes, NoteSet{kNoteFft | kNoteWinograd});
  EXPECT_THAT(error_for("CONVPLAN_FORBIDDEN_NOTES", "fft,wingrad"), HasSubstr("'wingrad'"));
}

TEST_F(PolicyEnvTest, ReadsBooleans) {
  for (const char* var : {"CONVPLAN_DETERMINISTIC", "CONVPLAN_ALLOW_RUNTIME_COMPILATION"}) {
    for (const auto& [text, value] : std::map<std::string, bool>{{"1", true},
                                                                 {"true", true},
                                                                 {"TRUE", true},
                                                                 {"yes", true},
                                                                 {"On", true},
                                                                 {"0", false},
                                                                 {"false", false},
                                                                 {"NO", false},
                                                                 {"off", false}}) {
      auto p = read(var, text);
      ASSERT_TRUE(p.ok()) << var << "=" << text;
      EXPECT_EQ(std::string(var) == "CONVPLAN_DETERMINISTIC" ? p->deterministic
                                                             : p->allow_runtime_compilation,
                value)
          << var << "=" << text;
    }
    EXPECT_THAT(error_for(var, "maybe"), HasSubstr("not a boolean"));
    EXPECT_THAT(error_for(var, "maybe"), HasSubstr(var));
    error_for(var, "2");
    error_for(var, "");
    env_.set(var, std::nullopt);
  }
}

TEST_F(PolicyEnvTest, ReadsWorkspaceLimitWithSuffixes) {
  const std::map<std::string, int64_t> good = {
      {"0", 0},          {"1048576", 1048576},     {"512K", 512 << 10},
      {"64M", 64 << 20}, {"2G", int64_t{2} << 30}, {"3kib", 3 << 10},
      {"5MB", 5 << 20}};
  for (const auto& [text, bytes] : good) {
    auto p = read("CONVPLAN_WORKSPACE_LIMIT", text);
    ASSERT_TRUE(p.ok()) << text << ": " << p.status().to_string();
    EXPECT_EQ(p->workspace_limit, bytes) << text;
  }
  EXPECT_THAT(error_for("CONVPLAN_WORKSPACE_LIMIT", "64X"), HasSubstr("unknown size suffix 'X'"));
  EXPECT_THAT(error_for("CONVPLAN_WORKSPACE_LIMIT", "-1"), HasSubstr("not a byte count"));
  EXPECT_THAT(error_for("CONVPLAN_WORKSPACE_LIMIT", "M"), HasSubstr("not a byte count"));
  EXPECT_THAT(error_for("CONVPLAN_WORKSPACE_LIMIT", "99999999999G"), HasSubstr("too large"));
  error_for("CONVPLAN_WORKSPACE_LIMIT", "1.5G");
  error_for("CONVPLAN_WORKSPACE_LIMIT", "");
}

TEST_F(PolicyEnvTest, ReadsBudget) {
  auto p = read("CONVPLAN_TUNE_BUDGET_MS", "2500.5");
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->budget_ms, 2500.5);
  EXPECT_THAT(error_for("CONVPLAN_TUNE_BUDGET_MS", "soon"), HasSubstr("not a number"));
  EXPECT_THAT(error_for("CONVPLAN_TUNE_BUDGET_MS", "0"), HasSubstr("out of range (0, 1e+09]"));
  EXPECT_THAT(error_for("CONVPLAN_TUNE_BUDGET_MS", "nan"), HasSubstr("must be a finite number"));
  error_for("CONVPLAN_TUNE_BUDGET_MS", "-5");
  error_for("CONVPLAN_TUNE_BUDGET_MS", "inf");
  error_for("CONVPLAN_TUNE_BUDGET_MS", "10ms");
}

TEST_F(PolicyEnvTest, ReadsVerbosity) {
  auto p = read("CONVPLAN_VERBOSE", "2");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->verbose, 2);
  EXPECT_THAT(error_for("CONVPLAN_VERBOSE", "4"), HasSubstr("0, 1, 2 or 3"));
  error_for("CONVPLAN_VERBOSE", "loud");
  error_for("CONVPLAN_VERBOSE", "-1");
}

// ---- The key ----

TEST(PolicyKeyTest, IgnoresFieldsThatDoNotChangeTheChoice) {
  TunePolicy a, b;
  b.verbose = 2;
  b.warmup_runs = 7;
  b.timed_runs = 31;
  b.budget_ms = 1;  // not exhaustive: the budget does not matter
  EXPECT_EQ(a.key(), b.key());
}

TEST(PolicyKeyTest, EveryChoiceChangingFieldChangesTheKey) {
  const TunePolicy base;
  std::vector<TunePolicy> variants(11, base);
  variants[0].mode = TuneMode::kHeuristic;
  variants[1].disabled_fwd = {{5, {}}};
  variants[2].disabled_bwd_data = {{5, {}}};
  variants[3].disabled_bwd_filter = {{5, {}}};
  variants[4].errata = {ErrataRule{}};
  variants[5].forbidden_notes = kNoteFft;
  variants[6].deterministic = true;
  variants[7].allow_runtime_compilation = false;
  variants[8].workspace_limit = 1 << 20;
  variants[9].validate = false;
  variants[10].disabled_fwd = {{5, {{3, 1}}}};
  std::set<std::string> keys{base.key()};
  for (const TunePolicy& v : variants) {
    EXPECT_TRUE(keys.insert(v.key()).second) << "duplicate key " << v.key();
  }
}

TEST(PolicyKeyTest, ExhaustiveBudgetIsPartOfTheKey) {
  TunePolicy a, b;
  a.mode = b.mode = TuneMode::kExhaustive;
  b.budget_ms = 500;
  EXPECT_NE(a.key(), b.key());
}

TEST(PolicyKeyTest, RuleOrderAndRepeatsDoNotMatter) {
  TunePolicy a, b;
  a.disabled_fwd = {{5, {}}, {7, {{3, 1}}}};
  b.disabled_fwd = {{7, {{3, 1}}}, {5, {}}, {5, {}}};
  EXPECT_EQ(a.key(), b.key());
}

TEST(PolicyKeyTest, ErrataKeyIsTheContentNotTheFileOrLabel) {
  auto one = parse_errata_rules(R"({"rules":[{"id":"a","engine":5,"shape":{"c":[1,64]}}]})", "f1");
  auto same = parse_errata_rules(R"({"rules":[{"id":"b","engine":5,"shape":{"c":[1,64]}}]})", "f2");
  auto other =
      parse_errata_rules(R"({"rules":[{"id":"a","engine":5,"shape":{"c":[1,65]}}]})", "f1");
  ASSERT_TRUE(one.ok() && same.ok() && other.ok());
  TunePolicy a, b, c;
  a.errata = *one;
  b.errata = *same;
  c.errata = *other;
  EXPECT_EQ(a.key(), b.key());
  EXPECT_NE(a.key(), c.key());
}

TEST(PolicyKeyTest, KeyHasNoRecordKeySeparator) {
  TunePolicy p;
  p.disabled_fwd = {{5, {{3, 1}}}};
  p.forbidden_notes = kNoteFft | kNoteWinograd;
  p.errata = {ErrataRule{}};
  EXPECT_EQ(p.key().find('|'), std::string::npos) << p.key();
}

}  // namespace
}  // namespace convplan
