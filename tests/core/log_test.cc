// The logging sink: levels, the application's sink, CONVPLAN_LOG_LEVEL.
#include "convplan/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace convplan {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_log_sink([this](LogLevel level, std::string_view message) {
      std::lock_guard<std::mutex> lock(mu_);
      got_.emplace_back(level, std::string(message));
    });
    set_log_level(LogLevel::kInfo);
  }
  void TearDown() override {
    set_log_sink(nullptr);
    set_log_level(LogLevel::kInfo);
    unsetenv("CONVPLAN_LOG_LEVEL");
  }
  std::mutex mu_;
  std::vector<std::pair<LogLevel, std::string>> got_;
};

TEST_F(LogTest, TheSinkGetsMessagesAtOrAboveTheLevel) {
  log(LogLevel::kDebug, "d");
  log(LogLevel::kInfo, "i");
  log(LogLevel::kWarning, "w");
  set_log_level(LogLevel::kError);
  log(LogLevel::kWarning, "w2");
  log(LogLevel::kError, "e");
  set_log_level(LogLevel::kOff);
  log(LogLevel::kError, "e2");
  const std::vector<std::pair<LogLevel, std::string>> want = {
      {LogLevel::kInfo, "i"}, {LogLevel::kWarning, "w"}, {LogLevel::kError, "e"}};
  EXPECT_EQ(got_, want);
  EXPECT_FALSE(log_enabled(LogLevel::kError));
}

TEST_F(LogTest, DefaultSinkWritesOneLineToStderr) {
  set_log_sink(nullptr);
  ::testing::internal::CaptureStderr();
  log(LogLevel::kWarning, "a warning");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "convplan: a warning\n");
  EXPECT_TRUE(got_.empty());
}

TEST_F(LogTest, EnvironmentSetsTheLevelAndABadValueNamesTheVariable) {
  setenv("CONVPLAN_LOG_LEVEL", "error", 1);
  ASSERT_TRUE(set_log_level_from_environment().ok());
  EXPECT_EQ(log_level(), LogLevel::kError);
  setenv("CONVPLAN_LOG_LEVEL", "loud", 1);
  const Status s = set_log_level_from_environment();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("CONVPLAN_LOG_LEVEL='loud'"));
  EXPECT_EQ(log_level(), LogLevel::kError) << "a bad value leaves the level";
}

TEST_F(LogTest, LevelNamesRoundTrip) {
  for (LogLevel l :
       {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError, LogLevel::kOff}) {
    StatusOr<LogLevel> back = parse_log_level(to_string(l));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, l);
  }
  EXPECT_FALSE(parse_log_level("INFO").ok());
}

}  // namespace
}  // namespace convplan
