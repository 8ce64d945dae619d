// Model suites: lists of the distinct convolutions of a network, for `convplan bench` and
// bench/torch_compare.py. The format (suites/README.md):
//
//   # a comment, to the end of the line; blank lines are ignored
//   NAME COUNT DESCRIPTOR
//
// one convolution per line, fields separated by blanks: NAME is [A-Za-z0-9_.-]+ and unique in
// the file, COUNT (>= 1) how many times the convolution occurs in the model, DESCRIPTOR the text
// form parse_problem() reads (an optional "dir:..,dt:../" prefix, then benchdnn's letters). mb may
// be left out; --batch (or the bench's default) sets it then. Built-in suites are the files of
// suites/ compiled into the program.
//
// Value types and pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "convplan/problem.h"
#include "convplan/status.h"
#include "problem_args.h"

namespace convplan::cli {

// The largest COUNT of one line. With it no sum of counts can overflow (a file would need 9e9
// lines), and a count that is a typo for a huge number is refused rather than printed wrapped.
inline constexpr int64_t kMaxSuiteCount = 1000000000;

struct SuiteEntry {
  std::string name;
  int64_t count = 1;
  std::string descriptor;  // as written in the file
  ConvProblem problem;     // parse_problem(descriptor)
  GivenFields given;       // what the descriptor set itself
  int line = 0;            // 1-based
};

struct Suite {
  std::string name;    // the built-in name, or the file's path
  std::string source;  // where it came from, for messages: "suites/resnet50.txt" or the path
  std::vector<SuiteEntry> entries;
  int64_t total_count() const;  // sum of counts
};

// Parses a suite's text. Errors (kInvalidArgument) read "SOURCE:LINE: what is wrong", with the
// parser's message for a bad descriptor.
StatusOr<Suite> parse_suite(std::string_view text, std::string_view source_name);
// Reads and parses a file; kNotFound when it cannot be opened, naming the path; kInvalidArgument
// when it is not a regular file or is larger than max_input_bytes() (input_limits.h).
StatusOr<Suite> load_suite_file(const std::string& path);

// The suites compiled in (the files of suites/ without ".txt"), sorted.
std::vector<std::string> builtin_suite_names();
// kNotFound naming the known suites when `name` is not one of them.
StatusOr<Suite> builtin_suite(std::string_view name);

// One problem of a suite after the command line's flags and defaults (see make_problem()).
struct SuiteProblem {
  std::string name;
  int64_t count = 1;
  ConvProblem problem;
};
// What `convplan bench` assumes where neither its flags nor a descriptor say: forward, bf16,
// channels-last, batch 32.
ProblemOverrides bench_defaults();

// Every entry with `flags` and `defaults` applied, merging entries that became equal (their
// counts add, the first name stays). Errors name the source, line and entry.
StatusOr<std::vector<SuiteProblem>> suite_problems(const Suite& suite,
                                                   const ProblemOverrides& flags,
                                                   const ProblemOverrides& defaults);

}  // namespace convplan::cli
