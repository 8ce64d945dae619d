// The tuner's roofline floor in the CLI (tools/convplan/gpu.h): from the rates the session
// measured, else from those kept in the tuning database. With the database off
// (bench/torch_compare.py runs
// `--db off`) the tuner had no floor at all, so its near-the-floor rules never applied (issue 21).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "convplan/problem.h"
#include "convplan/tuning_db.h"
#include "gpu.h"
#include "report.h"

namespace convplan::cli {
namespace {

ConvProblem layer() {
  StatusOr<ConvProblem> p =
      parse_problem("dt:bf16,layout:nhwc/g1mb256ic64ih56iw56oc64oh56ow56kh3kw3sh1sw1ph1pw1");
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return *p;
}

double floor_at(double copy_gbps, double matrix_tflops) {
  Rates r;
  r.copy_gbps = copy_gbps;
  r.matrix_tflops = matrix_tflops;
  return roofline_floor_ms(layer(), r);
}

TEST(RooflineFloorSource, TheSessionsRatesNeedNoDatabase) {
  auto known = std::make_shared<KnownRates>();
  const auto floor = roofline_floor_source(known, nullptr, "H100");
  EXPECT_EQ(floor(layer()), -1);  // nothing measured yet
  known->put("copy_gbps", 3000);
  EXPECT_EQ(floor(layer()), -1);  // the matrix rate is still missing
  known->put(matrix_rate_name(DataType::kBFloat16, true), 700);
  EXPECT_GT(floor(layer()), 0);
  EXPECT_DOUBLE_EQ(floor(layer()), floor_at(3000, 700));
  EXPECT_EQ(matrix_rate_name(DataType::kBFloat16, true), "matrix_tflops:bf16:tc");
}

TEST(RooflineFloorSource, TheDatabasesRatesServeWhereTheSessionHasNone) {
  char tmpl[] = "/tmp/convplan-floor-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    auto db = TuningDatabase::open(dir + "/tuning.db");
    ASSERT_TRUE(db.ok()) << db.status().to_string();
    ASSERT_TRUE((*db)->put_device_rate(DeviceRate{"H100", "copy_gbps", 2000, "test", 0}).ok());
    ASSERT_TRUE(
        (*db)->put_device_rate(DeviceRate{"H100", "matrix_tflops:bf16:tc", 500, "test", 0}).ok());
    auto known = std::make_shared<KnownRates>();
    EXPECT_DOUBLE_EQ(roofline_floor_source(known, db->get(), "H100")(layer()), floor_at(2000, 500));
    EXPECT_EQ(roofline_floor_source(known, db->get(), "H200")(layer()), -1);  // another model's
    known->put("copy_gbps", 3000);  // the session's own measurement comes first
    known->put("matrix_tflops:bf16:tc", 700);
    EXPECT_DOUBLE_EQ(roofline_floor_source(known, db->get(), "H100")(layer()), floor_at(3000, 700));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace convplan::cli
