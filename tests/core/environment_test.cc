// The shared readers of CONVPLAN_* values (environment.h) and the input limits
// (input_limits.h): every boolean spelling, non-finite and out-of-range numbers, JSON nesting,
// and files that are not regular or are too large.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "convplan/environment.h"
#include "convplan/input_limits.h"

namespace convplan {
namespace {

TEST(EnvironmentTest, BooleansTakeTheUsualSpellingsInAnyCase) {
  for (const char* t : {"1", "true", "TRUE", "yes", "Yes", "on", "ON"}) {
    StatusOr<bool> v = parse_bool_value("CONVPLAN_X", t);
    ASSERT_TRUE(v.ok()) << t;
    EXPECT_TRUE(*v) << t;
  }
  for (const char* t : {"0", "false", "False", "no", "NO", "off", "Off"}) {
    StatusOr<bool> v = parse_bool_value("CONVPLAN_X", t);
    ASSERT_TRUE(v.ok()) << t;
    EXPECT_FALSE(*v) << t;
  }
  for (const char* t : {"", "2", "y", "maybe", "true ", "enable"}) {
    StatusOr<bool> v = parse_bool_value("CONVPLAN_X", t);
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument) << t;
    EXPECT_EQ(v.status().message().rfind("CONVPLAN_X='" + std::string(t) + "': not a boolean", 0),
              0u)
        << v.status().message();
  }
}

TEST(EnvironmentTest, NumbersAreFiniteAndInRange) {
  EXPECT_EQ(*parse_number_value("N", "2.5", 0, 10), 2.5);
  for (const char* t : {"nan", "NaN", "inf", "-inf", "infinity", "1e400"}) {
    StatusOr<double> v = parse_number_value("N", t, 0, 1e300);
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument) << t;
    EXPECT_NE(v.status().message().find("finite"), std::string::npos) << v.status().message();
  }
  EXPECT_FALSE(parse_number_value("N", "0", 0, 10, /*min_exclusive=*/true).ok());
  EXPECT_TRUE(parse_number_value("N", "0", 0, 10).ok());
  EXPECT_FALSE(parse_number_value("N", "10.5", 0, 10).ok());
  EXPECT_FALSE(parse_number_value("N", "1x", 0, 10).ok());
  EXPECT_FALSE(parse_number_value("N", "", 0, 10).ok());
  EXPECT_EQ(*parse_int_value("I", "7", 0, 9), 7);
  EXPECT_NE(
      parse_int_value("I", "99999999999999999999", 0, 9).status().message().find("out of range"),
      std::string::npos);
  EXPECT_FALSE(parse_int_value("I", "-1", 0, 9).ok());
  EXPECT_FALSE(parse_int_value("I", "3.0", 0, 9).ok());
}

TEST(EnvironmentTest, ByteSizesTakeSuffixesAndRefuseOverflow) {
  EXPECT_EQ(*parse_byte_size_value("B", "64M"), int64_t{64} << 20);
  EXPECT_EQ(*parse_byte_size_value("B", "3kib"), 3072);
  EXPECT_NE(parse_byte_size_value("B", "99999999999G").status().message().find("too large"),
            std::string::npos);
  EXPECT_NE(parse_byte_size_value("B", "99999999999999999999").status().message().find("too large"),
            std::string::npos);
  EXPECT_FALSE(parse_byte_size_value("B", "-1").ok());
  EXPECT_FALSE(parse_byte_size_value("B", "1.5G").ok());
}

TEST(InputLimitsTest, NestingDeeperThanTheLimitIsRefusedWithoutRecursion) {
  EXPECT_TRUE(check_json_nesting("{\"a\":[[1]]}", "doc", 3).ok());
  EXPECT_FALSE(check_json_nesting("{\"a\":[[[1]]]}", "doc", 3).ok());
  // Brackets inside strings, escaped quotes included, do not count.
  EXPECT_TRUE(check_json_nesting("{\"a\":\"[[[[\\\"[[[[\"}", "doc", 1).ok());
  const std::string deep(1000000, '[');
  Status s = check_json_nesting(deep, "doc");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "doc: nested deeper than 32 levels (at byte 32)");
  EXPECT_FALSE(check_json_limits("[1,2,3]", "doc", 4).ok());
  EXPECT_TRUE(check_json_limits("[1,2,3]", "doc", 7).ok());
}

class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/convplan-input-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(InputFileTest, ReadsARegularFileWithinTheLimit) {
  std::ofstream(dir_ + "/a.json") << "{\"rules\":[]}";
  StatusOr<std::string> text = read_input_file(dir_ + "/a.json", "rules file", 1024);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text, "{\"rules\":[]}");
  EXPECT_EQ(read_input_file(dir_ + "/a.json", "rules file", 5).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(read_input_file(dir_ + "/none", "rules file", 5).status().code(),
            StatusCode::kNotFound);
}

TEST_F(InputFileTest, DevicesFifosAndFoldersAreRefusedWithoutReading) {
  // /dev/zero grew a read to 24 GB; a FIFO without a writer hung.
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  for (const std::string& path : {std::string("/dev/zero"), dir_ + "/fifo", dir_}) {
    StatusOr<std::string> text = read_input_file(path, "errata file", 1 << 20);
    EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument) << path;
    EXPECT_NE(text.status().message().find("not a regular file"), std::string::npos)
        << text.status().message();
  }
}

TEST(InputLimitsTest, TheFileSizeLimitIsSettable) {
  ::unsetenv("CONVPLAN_MAX_INPUT_BYTES");
  EXPECT_EQ(*max_input_bytes(), kDefaultMaxInputBytes);
  ::setenv("CONVPLAN_MAX_INPUT_BYTES", "2M", 1);
  EXPECT_EQ(*max_input_bytes(), int64_t{2} << 20);
  ::setenv("CONVPLAN_MAX_INPUT_BYTES", "12", 1);
  EXPECT_FALSE(max_input_bytes().ok());
  ::setenv("CONVPLAN_MAX_INPUT_BYTES", "lots", 1);
  EXPECT_NE(max_input_bytes().status().message().find("CONVPLAN_MAX_INPUT_BYTES='lots'"),
            std::string::npos);
  ::unsetenv("CONVPLAN_MAX_INPUT_BYTES");
}

}  // namespace
}  // namespace convplan
