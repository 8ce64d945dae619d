// What the commands print and write: text tables, problem JSON, CSV quoting, summary statistics
// of timed runs, and the roofline floor. Pure functions; no GPU.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "convplan/engine_config.h"
#include "convplan/problem.h"
#include "convplan/status.h"

namespace convplan::cli {

// A text table: a header row, then rows; columns are as wide as their widest cell. Columns listed
// in right_aligned are right-aligned (numbers), the others left-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header, std::vector<bool> right_aligned = {});
  void add_row(std::vector<std::string> cells);  // REQUIRES: cells.size() == header size
  void add_separator();                          // a line of dashes (before a total row)
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a separator
};

// "%.3f"-style formatting with `digits` decimals; "-" for a negative (unknown) value.
std::string fixed(double v, int digits);
// 4096 -> "4.0 KiB".
std::string human_bytes(double bytes);

// One field of a CSV record, quoted when it holds a comma, quote or newline.
std::string csv_field(const std::string& s);
std::string csv_line(const std::vector<std::string>& fields);

// Every field of the problem (and its derived shapes) as JSON, for scripts such as
// bench/torch_compare.py: direction, spatial_dims, n, c, k, groups, input, filter, output,
// pad_before, pad_after, stride, dilation (each spatial list spatial_dims long), data_type,
// compute_type, layout, allow_tensor_cores, alpha, beta, flops, min_bytes, descriptor.
nlohmann::json problem_json(const ConvProblem& p);
// An engine configuration's knobs: "TILE_SIZE=4 ..." ("(none)" when it has none), and as JSON.
std::string knobs_text(const EngineConfig& config);
nlohmann::json knobs_json(const EngineConfig& config);

// Median, extremes and spread of timed runs (milliseconds).
struct TimeSummary {
  int runs = 0;
  double median_ms = -1;
  double min_ms = -1;
  double max_ms = -1;
  double p10_ms = -1;
  double p90_ms = -1;
};
TimeSummary summarize(std::vector<float> times_ms);  // empty input: runs == 0, fields -1

// The machine rates the roofline floor is computed from.
struct Rates {
  double matrix_tflops = 0;   // dense matrix multiply rate, 1e12 flop/s
  double copy_gbps = 0;       // device memory bandwidth, 1e9 bytes/s (read + write counted)
  std::string matrix_source;  // "--peak-tflops" or how it was measured
  std::string copy_source;
};
// The least time the problem can take on a machine with these rates, max(flops / matrix rate,
// min_bytes / bandwidth), in ms; -1 when a rate is unknown (<= 0).
double roofline_floor_ms(const ConvProblem& p, const Rates& rates);

// "2026-12-02T13:45:07Z".
std::string utc_timestamp();
// Writes `text` to `path`, or to standard output when path is "-"; kIoError naming the path.
Status write_text(const std::string& path, const std::string& text);

}  // namespace convplan::cli
