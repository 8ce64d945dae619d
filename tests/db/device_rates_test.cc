// Device rates in the tuning database (issue 21: the roofline peaks measured once per device
// model and kept): stored apart from the records, kept across opens, keyed by model and name.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "convplan/tuning_db.h"
#include "db/db_test_records.h"

namespace convplan {
namespace {

namespace fs = std::filesystem;

class DeviceRatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/convplan-rates-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::unique_ptr<TuningDatabase> open_db() {
    auto db = TuningDatabase::open(dir_ + "/tuning.db");
    EXPECT_TRUE(db.ok()) << db.status().to_string();
    return db.ok() ? std::move(db).value() : nullptr;
  }
  static DeviceRate rate(const std::string& model, const std::string& name, double value) {
    return DeviceRate{model, name, value, "measured: test", 1700000000};
  }
  std::string dir_;
};

TEST_F(DeviceRatesTest, StoredRatesAreFoundAgainAfterReopeningByModelAndName) {
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    EXPECT_EQ(db->find_device_rate("H200", "copy_gbps").status().code(), StatusCode::kNotFound);
    ASSERT_TRUE(db->put_device_rate(rate("H200", "copy_gbps", 4100)).ok());
    ASSERT_TRUE(db->put_device_rate(rate("H200", "matrix_tflops:bf16:tc", 700)).ok());
    ASSERT_TRUE(db->put_device_rate(rate("H100", "copy_gbps", 3000)).ok());
    ASSERT_TRUE(db->put_device_rate(rate("H200", "copy_gbps", 4200)).ok());  // replaces
  }
  auto db = open_db();
  ASSERT_TRUE(db);
  auto copy = db->find_device_rate("H200", "copy_gbps");
  ASSERT_TRUE(copy.ok()) << copy.status().to_string();
  EXPECT_EQ(*copy, rate("H200", "copy_gbps", 4200));
  EXPECT_EQ(db->find_device_rate("H100", "copy_gbps")->value, 3000);
  EXPECT_EQ(db->find_device_rate("H200", "matrix_tflops:bf16:tc")->value, 700);
  EXPECT_EQ(db->find_device_rate("H100", "matrix_tflops:bf16:tc").status().code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(db->report().moved_aside.empty());  // the extra table is not taken for damage
}

TEST_F(DeviceRatesTest, RatesLeaveTheRecordsAloneAndRefuseNonPositiveValues) {
  auto db = open_db();
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->put(testing::make_test_record(3)).ok());
  ASSERT_TRUE(db->put_device_rate(rate("H200", "copy_gbps", 4100)).ok());
  auto all = db->list();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 1u);
  Status zero = db->put_device_rate(rate("H200", "copy_gbps", 0));
  EXPECT_EQ(zero.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.message().find("value=0"), std::string::npos) << zero.message();
  auto verify = db->verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->problems.empty());
}

TEST_F(DeviceRatesTest, InMemoryDatabaseKeepsRatesToo) {
  auto db = TuningDatabase::open(":memory:");
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->put_device_rate(rate("H200", "copy_gbps", 4100)).ok());
  EXPECT_EQ((*db)->find_device_rate("H200", "copy_gbps")->value, 4100);
}

}  // namespace
}  // namespace convplan
