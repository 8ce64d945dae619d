// The report pieces of the command line: tables, CSV quoting, time summaries, the roofline floor
// and the problem's JSON.
#include "report.h"

#include <gtest/gtest.h>

#include <sstream>

#include "convplan/problem.h"

namespace convplan::cli {
namespace {

TEST(Table, AlignsColumnsToTheWidestCell) {
  Table t({"name", "ms"}, {false, true});
  t.add_row({"conv1", "1.5"});
  t.add_row({"a", "12.25"});
  t.add_separator();
  t.add_row({"total", "13.75"});
  std::ostringstream out;
  t.print(out);
  EXPECT_EQ(out.str(),
            "name      ms\n"
            "conv1    1.5\n"
            "a      12.25\n"
            "------------\n"
            "total  13.75\n");
}

TEST(Csv, QuotesOnlyFieldsThatNeedIt) {
  EXPECT_EQ(csv_field("eng12"), "eng12");
  EXPECT_EQ(csv_field("eng12:k3=1,k10=2"), "\"eng12:k3=1,k10=2\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_line({"a", "b,c", ""}), "a,\"b,c\",\n");
}

TEST(Summarize, MedianOfOddAndEvenCounts) {
  TimeSummary s = summarize({3, 1, 2});
  EXPECT_EQ(s.runs, 3);
  EXPECT_DOUBLE_EQ(s.median_ms, 2);
  EXPECT_DOUBLE_EQ(s.min_ms, 1);
  EXPECT_DOUBLE_EQ(s.max_ms, 3);
  s = summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.median_ms, 2.5);
  s = summarize({});
  EXPECT_EQ(s.runs, 0);
  EXPECT_LT(s.median_ms, 0);
}

TEST(Roofline, FloorIsTheSlowerOfComputeAndMemory) {
  const ConvProblem p =
      *parse_problem("dt:bf16,layout:nhwc/mb32ic64ih56iw56oc64oh56ow56kh3kw3ph1pw1");
  Rates r;
  r.matrix_tflops = 1000;
  r.copy_gbps = 4000;
  const double compute_ms = p.flops() / 1e15 * 1e3;
  const double memory_ms = p.min_bytes() / 4e12 * 1e3;
  EXPECT_DOUBLE_EQ(roofline_floor_ms(p, r), std::max(compute_ms, memory_ms));
  r.copy_gbps = 1;  // memory-bound now
  EXPECT_DOUBLE_EQ(roofline_floor_ms(p, r), p.min_bytes() / 1e9 * 1e3);
  r.matrix_tflops = 0;
  EXPECT_LT(roofline_floor_ms(p, r), 0) << "unknown rate: no floor";
}

TEST(ProblemJson, HoldsEveryFieldAScriptNeeds) {
  const ConvProblem p =
      *parse_problem("dir:bwd_filter,dt:f16,layout:nhwc/g2mb4ic8id5ih6iw7oc4kd3kh3kw1sd2pd1ph1dh1");
  const nlohmann::json j = problem_json(p);
  EXPECT_EQ(j["descriptor"], p.to_string());
  EXPECT_EQ(j["direction"], "bwd_filter");
  EXPECT_EQ(j["data_type"], "f16");
  EXPECT_EQ(j["layout"], "nhwc");
  EXPECT_EQ(j["spatial_dims"], 3);
  EXPECT_EQ(j["groups"], 2);
  EXPECT_EQ(j["n"], 4);
  EXPECT_EQ(j["input"], (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(j["filter"], (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(j["stride"], (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(j["dilation"], (std::vector<int64_t>{1, 2, 1}));
  EXPECT_EQ(j["pad_before"], (std::vector<int64_t>{1, 1, 0}));
  const SpatialDims o = p.output();
  EXPECT_EQ(j["output"], (std::vector<int64_t>{o[0], o[1], o[2]}));
  EXPECT_DOUBLE_EQ(j["flops"].get<double>(), p.flops());
}

TEST(Formatting, FixedShowsUnknownAsDash) {
  EXPECT_EQ(fixed(1.23456, 2), "1.23");
  EXPECT_EQ(fixed(-1, 2), "-");
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
}

}  // namespace
}  // namespace convplan::cli
