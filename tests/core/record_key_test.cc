// RecordKey: its text form (unchanged for the databases written before it existed), parse, hash.
#include "convplan/record_key.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "convplan/tuning_record.h"

namespace convplan {
namespace {

using ::testing::HasSubstr;

constexpr const char kModel[] = "NVIDIA H200|sm90|sms132|cudnn91900";

RecordKey sample_key() {
  RecordKey k;
  k.device_model = kModel;
  StatusOr<ConvProblem> p = parse_problem("dt:bf16,layout:nhwc/mb32ic64ih56oc64oh56kh3ph1");
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  k.problem = *p;
  k.policy = "mode=limited fwd=[] det=0";
  k.library_version = "0.1.0";
  return k;
}

TEST(RecordKeyTest, TextIsTheFourPartsJoinedByBarsAsStoredBefore) {
  const RecordKey k = sample_key();
  EXPECT_EQ(k.to_string(),
            std::string(kModel) + "|" + k.problem.to_string() + "|" + k.policy + "|0.1.0");
}

TEST(RecordKeyTest, TunerFormatAboveOneIsASuffixOfTheVersion) {
  RecordKey k = sample_key();
  k.tuner_format = 3;
  EXPECT_THAT(k.to_string(), ::testing::EndsWith("|0.1.0;tuner=3"));
  StatusOr<RecordKey> back = RecordKey::parse(k.to_string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, k);
}

TEST(RecordKeyTest, ParseReadsToStringBack) {
  const RecordKey k = sample_key();
  StatusOr<RecordKey> back = RecordKey::parse(k.to_string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, k);
  EXPECT_EQ(back->tuner_format, 1);
}

TEST(RecordKeyTest, APolicyMayContainBars) {
  RecordKey k = sample_key();
  k.policy = "mode=limited errata=[a|b|c]";
  StatusOr<RecordKey> back = RecordKey::parse(k.to_string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->policy, k.policy);
  EXPECT_EQ(back->device_model, kModel);
}

TEST(RecordKeyTest, ParseErrorsNameThePart) {
  const RecordKey k = sample_key();
  const std::string good = k.to_string();
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"a|b|c", "has 3 '|'-separated fields"},
      {std::string(kModel) + "|not a problem|p|0.1.0", "problem: "},
      {std::string(kModel) + "|" + k.problem.to_string() + "||0.1.0", "the policy is empty"},
      {good + ";tuner=x", "tuner format 'x'"},
      {good + ";tuner=1", "tuner format '1'"},
      {std::string(kModel) + "|" + k.problem.to_string() + "|p|", "library version is empty"},
  };
  for (const Case& c : cases) {
    StatusOr<RecordKey> parsed = RecordKey::parse(c.text);
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.message)) << c.text;
    EXPECT_THAT(parsed.status().message(), HasSubstr("record key '")) << c.text;
  }
}

TEST(RecordKeyTest, HashIsFnv1aOfTheTextAndSeparatesKeys) {
  const RecordKey k = sample_key();
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : k.to_string()) h = (h ^ c) * 0x100000001b3ull;
  EXPECT_EQ(k.hash(), h);
  RecordKey other = k;
  other.problem.n = 64;
  EXPECT_NE(other.hash(), k.hash());
  other = k;
  other.tuner_format = 2;
  EXPECT_NE(other.hash(), k.hash());
}

TEST(RecordKeyTest, TuningRecordKeyMatchesTheRecordKeyItWasGiven) {
  RecordKey k = sample_key();
  k.tuner_format = 2;
  TuningRecord r;
  r.set_key(k);
  EXPECT_EQ(r.key(), k.to_string());
  StatusOr<RecordKey> back = r.record_key();
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, k);
  // The JSON form keeps the format, and leaves it out at 1 (records as written before).
  StatusOr<TuningRecord> reread = tuning_record_from_json(to_json(r));
  ASSERT_TRUE(reread.ok()) << reread.status().to_string();
  EXPECT_EQ(reread->key(), k.to_string());
  r.tuner_format = 1;
  EXPECT_THAT(to_json(r), ::testing::Not(HasSubstr("tuner_format")));
}

TEST(RecordKeyTest, CudnnVersionOfAModelKey) {
  EXPECT_EQ(cudnn_version_of_model(kModel), 91900);
  EXPECT_EQ(cudnn_version_of_model("d"), std::nullopt);
  EXPECT_EQ(cudnn_version_of_model("x|cudnn9a"), std::nullopt);
}

}  // namespace
}  // namespace convplan
