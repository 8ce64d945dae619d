// How the command line turns a descriptor and its flags into a ConvProblem: which fields the
// descriptor's text set itself (so that a flag overrides them and a default does not), and the
// overrides. Pure functions; no GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "convplan/problem.h"
#include "convplan/status.h"

namespace convplan::cli {

// Which fields a problem text gave explicitly (prefix flags dir:, dt:, layout:, and mb in the
// descriptor). REQUIRES: parse_problem(text).ok().
struct GivenFields {
  bool direction = false;
  bool data_type = false;
  bool layout = false;
  bool batch = false;
};
GivenFields given_fields(std::string_view text);

// Values for the four fields. Each set field wins over what the text gave.
struct ProblemOverrides {
  std::optional<Direction> direction;
  std::optional<DataType> data_type;
  std::optional<Layout> layout;
  std::optional<int64_t> batch;
};

// The problem of `text` with `flags` applied over it, and `defaults` applied to the fields that
// neither the flags nor the text set. A new data type resets the compute type to
// default_compute_type(); a new layout drops explicit strides. Errors (kInvalidArgument) carry
// the parser's or validate()'s message.
StatusOr<ConvProblem> make_problem(std::string_view text, const ProblemOverrides& flags,
                                   const ProblemOverrides& defaults = {});
// The same for an already parsed problem and what its text gave.
StatusOr<ConvProblem> apply_overrides(ConvProblem problem, const GivenFields& given,
                                      const ProblemOverrides& flags,
                                      const ProblemOverrides& defaults = {});

}  // namespace convplan::cli
