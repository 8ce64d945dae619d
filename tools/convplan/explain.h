// `convplan explain`: what convplan knows of a problem without a GPU: its canonical form, output
// shape, FLOPs, minimum bytes, roofline floor at given peaks, and every rewrite that applies
// (convplan/rewrite.h) with its rewritten problem in the same text form. Pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "convplan/problem.h"
#include "report.h"

namespace convplan::cli {

// The H200's dense bf16 matrix rate and its memory bandwidth: explain's default peaks.
inline constexpr double kDefaultPeakTflops = 989.0;
inline constexpr double kDefaultPeakGbps = 4800.0;

nlohmann::json explain_json(const ConvProblem& problem, const Rates& rates);
std::string explain_text(const ConvProblem& problem, const Rates& rates);

}  // namespace convplan::cli
