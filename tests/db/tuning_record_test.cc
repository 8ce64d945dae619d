// TuningRecord: its key, its JSON form and the reading of damaged JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "convplan/problem.h"
#include "convplan/tune_policy.h"
#include "convplan/tuning_record.h"
#include "db/db_test_records.h"

namespace convplan {
namespace {

using convplan::testing::make_test_record;
using Json = nlohmann::json;

// The record's JSON with `edit` applied, as text.
template <typename Edit>
std::string edited_json(const TuningRecord& r, Edit edit) {
  Json j = Json::parse(to_json(r));
  edit(j);
  return j.dump();
}

TEST(TuningRecordTest, KeyJoinsDeviceProblemPolicyAndVersionWithBars) {
  TuningRecord r;
  r.device_model = "dev";
  r.problem = "prob";
  r.policy = "pol";
  r.convplan_version = "9.9";
  EXPECT_EQ(r.key(), "dev|prob|pol|9.9");
}

TEST(TuningRecordTest, DeviceModelKeyNamesModelComputeCapabilitySmsAndCudnn) {
  DeviceInfo d;
  d.ordinal = 3;
  d.uuid = "GPU-1234";
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.memory_bytes = int64_t{141} << 30;
  d.cudnn_version = 91900;
  EXPECT_EQ(d.model_key(), "NVIDIA H200|sm90|sms132|cudnn91900");
  DeviceInfo other = d;
  other.ordinal = 0;
  other.uuid = "GPU-5678";
  other.memory_bytes = 1;
  EXPECT_EQ(other.model_key(), d.model_key())
      << "ordinal, UUID and memory size are not in the model key";
}

TEST(TuningRecordTest, ConvplanVersionIsThreeNumbers) {
  const std::string v = convplan_version();
  int numbers = 0;
  size_t pos = 0;
  while (pos < v.size() && numbers < 3) {
    size_t end = v.find_first_not_of("0123456789", pos);
    if (end == pos) break;
    ++numbers;
    pos = end == std::string::npos ? v.size() : end;
    if (numbers < 3 && pos < v.size() && v[pos] == '.') ++pos;
  }
  EXPECT_EQ(numbers, 3) << v;
}

TEST(TuningRecordTest, RecordKeyIsDeviceModelProblemPolicyAndLibraryVersion) {
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.sm_count = 132;
  d.cudnn_version = 91900;
  ConvProblem problem;
  TunePolicy policy;
  EXPECT_EQ(
      record_key(d, problem, policy).to_string(),
      d.model_key() + "|" + problem.to_string() + "|" + policy.key() + "|" + convplan_version());
}

TEST(TuningRecordTest, JsonRoundTripKeepsEveryField) {
  for (int id : {0, 1, 7, 1000}) {
    const TuningRecord r = make_test_record(id, 3);
    StatusOr<TuningRecord> back = tuning_record_from_json(to_json(r));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, r);
  }
  TuningRecord plain = make_test_record(5);
  plain.candidates.clear();
  plain.plan_json.clear();
  plain.config.knobs.clear();
  StatusOr<TuningRecord> back = tuning_record_from_json(to_json(plain));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, plain);
}

TEST(TuningRecordTest, JsonHoldsTheConfigAsTextAndAsKnobs) {
  const TuningRecord r = make_test_record(12, 1);
  Json j = Json::parse(to_json(r));
  EXPECT_EQ(j["config"]["text"], r.config.to_string());
  EXPECT_EQ(j["config"]["engine_id"], 12);
  ASSERT_EQ(j["config"]["knobs"].size(), 3u);
  EXPECT_EQ(j["config"]["knobs"][0]["type"], 3);
  EXPECT_EQ(j["config"]["knobs"][0]["value"], 0);
  EXPECT_EQ(j["candidates"].size(), 3u);
}

TEST(TuningRecordTest, NonFiniteNumbersSurviveTheJsonForm) {
  TuningRecord r = make_test_record(2);
  r.candidates[0].relative_error = std::numeric_limits<double>::infinity();
  r.candidates[1].relative_error = std::numeric_limits<double>::quiet_NaN();
  r.candidates[1].times_ms = {-std::numeric_limits<float>::infinity()};
  StatusOr<TuningRecord> back = tuning_record_from_json(to_json(r));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->candidates[0].relative_error, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(back->candidates[1].relative_error));
  ASSERT_EQ(back->candidates[1].times_ms.size(), 1u);
  EXPECT_EQ(back->candidates[1].times_ms[0], -std::numeric_limits<float>::infinity());
}

TEST(TuningRecordTest, MissingKeyFieldIsCorruptDataNamingIt) {
  const TuningRecord r = make_test_record(4);
  for (const char* field : {"device_model", "problem", "policy", "convplan_version"}) {
    StatusOr<TuningRecord> back =
        tuning_record_from_json(edited_json(r, [&](Json& j) { j.erase(field); }));
    ASSERT_FALSE(back.ok()) << field;
    EXPECT_EQ(back.status().code(), StatusCode::kCorruptData) << field;
    EXPECT_NE(back.status().message().find(field), std::string::npos) << back.status().message();
  }
  StatusOr<TuningRecord> empty =
      tuning_record_from_json(edited_json(r, [](Json& j) { j["policy"] = ""; }));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kCorruptData);
}

TEST(TuningRecordTest, WrongTypeDeepInsideNamesTheFieldPath) {
  const TuningRecord r = make_test_record(4);
  StatusOr<TuningRecord> back = tuning_record_from_json(
      edited_json(r, [](Json& j) { j["candidates"][1]["times_ms"][2] = "fast"; }));
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(back.status().message().find("candidates[1].times_ms[2]"), std::string::npos)
      << back.status().message();

  back = tuning_record_from_json(edited_json(r, [](Json& j) { j["workspace_bytes"] = 1.5; }));
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("workspace_bytes"), std::string::npos)
      << back.status().message();

  back =
      tuning_record_from_json(edited_json(r, [](Json& j) { j["config"]["knobs"][1]["type"] = 3; }));
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("config.knobs[1].type"), std::string::npos)
      << back.status().message();
}

TEST(TuningRecordTest, ConfigTextThatDisagreesWithItsKnobsIsRejected) {
  const TuningRecord r = make_test_record(4);
  StatusOr<TuningRecord> back =
      tuning_record_from_json(edited_json(r, [](Json& j) { j["config"]["text"] = "eng999"; }));
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(back.status().message().find("config.text"), std::string::npos)
      << back.status().message();
}

TEST(TuningRecordTest, GarbageIsCorruptDataNotAnException) {
  for (const char* text :
       {"", "{", "not json", "[1,2,3]", "null", "{\"device_model\": 5}", "{\"a\":\"\xff\xfe\"}"}) {
    StatusOr<TuningRecord> back = tuning_record_from_json(text);
    ASSERT_FALSE(back.ok()) << text;
    EXPECT_EQ(back.status().code(), StatusCode::kCorruptData) << text;
  }
}

TEST(TuningRecordTest, UnknownFieldsAreIgnoredAndOptionalOnesMayBeAbsent) {
  const TuningRecord r = make_test_record(9);
  StatusOr<TuningRecord> back = tuning_record_from_json(edited_json(r, [](Json& j) {
    j["added_in_a_later_version"] = {1, 2};
    j.erase("candidates");
    j.erase("plan_json");
    j.erase("tuning_ms");
  }));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->key(), r.key());
  EXPECT_TRUE(back->candidates.empty());
  EXPECT_EQ(back->plan_json, "");
  EXPECT_EQ(back->tuning_ms, 0);
}

}  // namespace
}  // namespace convplan

namespace convplan {
namespace {

// A record of a problem with a post-op chain, won by an unfused configuration: the key holds the
// chain (through the problem's canonical text), and the JSON keeps "unfused" on the config and
// on each candidate; a fused record's JSON has no "unfused" field at all.
TEST(TuningRecordPostOps, UnfusedConfigAndChainRoundTrip) {
  StatusOr<ConvProblem> p = parse_problem(
      "dt:bf16,layout:nhwc,post:bias+add+relu/g1mb32ic64ih56iw56oc256oh56ow56kh1kw1sh1sw1ph0pw0");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  TuningRecord r = testing::make_test_record(3);
  r.problem = p->to_string();
  r.config.unfused = true;
  r.candidates[0].config.unfused = true;
  r.plan_json = "convplan-unfused:{\"plan\": 1}";
  const std::string json = to_json(r);
  StatusOr<TuningRecord> back = tuning_record_from_json(json);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, r);
  EXPECT_TRUE(back->config.unfused);
  EXPECT_TRUE(back->candidates[0].config.unfused);
  EXPECT_FALSE(back->candidates[1].config.unfused);
  Json j = Json::parse(json);
  EXPECT_EQ(j["config"]["unfused"], true);
  EXPECT_EQ(j["config"]["text"], r.config.to_string());
  EXPECT_FALSE(j["candidates"][1]["config"].contains("unfused"));
  StatusOr<ConvProblem> again = parse_problem(back->problem);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *p);
  EXPECT_NE(r.key().find("post:bias+add+relu"), std::string::npos) << r.key();
}

TEST(TuningRecordPostOps, UnfusedMustBeABooleanAndAgreeWithTheText) {
  TuningRecord r = testing::make_test_record(4);
  r.config.unfused = true;
  Json j = Json::parse(to_json(r));
  j["config"]["unfused"] = "yes";
  StatusOr<TuningRecord> bad = tuning_record_from_json(j.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("config.unfused"), std::string::npos)
      << bad.status().message();
  j["config"]["unfused"] = false;  // the text still says unfused+
  bad = tuning_record_from_json(j.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("config.text"), std::string::npos)
      << bad.status().message();
}

TEST(RecordKeyPostOps, ChainsMakeDistinctKeys) {
  DeviceInfo device;
  device.name = "NVIDIA H200";
  TunePolicy policy;
  const std::string conv = "g1mb32ic64ih56iw56oc64oh56ow56kh3kw3sh1sw1ph1pw1";
  const std::string plain = record_key(device, *parse_problem(conv), policy).to_string();
  const std::string relu =
      record_key(device, *parse_problem("post:relu/" + conv), policy).to_string();
  const std::string bias_relu =
      record_key(device, *parse_problem("post:bias+relu/" + conv), policy).to_string();
  EXPECT_NE(plain, relu);
  EXPECT_NE(relu, bias_relu);
  EXPECT_NE(bias_relu.find("post:bias+relu"), std::string::npos) << bias_relu;
}

}  // namespace
}  // namespace convplan
