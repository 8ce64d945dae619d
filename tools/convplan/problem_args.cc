#include "problem_args.h"

#include <cctype>

namespace convplan::cli {

GivenFields given_fields(std::string_view text) {
  GivenFields given;
  std::string_view descriptor = text;
  const size_t slash = text.find('/');
  if (slash != std::string_view::npos) {
    descriptor = text.substr(slash + 1);
    std::string_view flags = text.substr(0, slash);
    while (!flags.empty()) {
      const size_t comma = flags.find(',');
      const std::string_view item = flags.substr(0, comma);
      const std::string_view key = item.substr(0, item.find(':'));
      if (key == "dir") given.direction = true;
      if (key == "dt") given.data_type = true;
      if (key == "layout" || key == "xs" || key == "ws" || key == "ys") given.layout = true;
      if (comma == std::string_view::npos) break;
      flags.remove_prefix(comma + 1);
    }
  }
  // The descriptor's entries are letters then digits; a name ('n...') runs to the end.
  size_t i = 0;
  while (i < descriptor.size()) {
    if (!std::islower(static_cast<unsigned char>(descriptor[i]))) {
      ++i;
      continue;
    }
    if (descriptor[i] == 'n') break;
    const size_t start = i;
    while (i < descriptor.size() && std::islower(static_cast<unsigned char>(descriptor[i]))) ++i;
    if (descriptor.substr(start, i - start) == "mb") given.batch = true;
  }
  return given;
}

StatusOr<ConvProblem> apply_overrides(ConvProblem p, const GivenFields& given,
                                      const ProblemOverrides& flags,
                                      const ProblemOverrides& defaults) {
  auto pick = [](const auto& flag, bool text_gave, const auto& fallback) {
    using T = std::decay_t<decltype(flag)>;
    if (flag) return flag;
    if (text_gave) return T{};
    return fallback;
  };
  if (auto dir = pick(flags.direction, given.direction, defaults.direction)) p.direction = *dir;
  if (auto dt = pick(flags.data_type, given.data_type, defaults.data_type)) {
    if (*dt != p.data_type) p = ConvProblem::with_data_type(p, *dt);
  }
  if (auto layout = pick(flags.layout, given.layout, defaults.layout)) {
    if (*layout != p.layout) {
      p.layout = *layout;
      p.x_strides = {};
      p.w_strides = {};
      p.y_strides = {};
    }
  }
  if (auto batch = pick(flags.batch, given.batch, defaults.batch)) p.n = *batch;
  CONVPLAN_RETURN_IF_ERROR(p.validate());
  return p;
}

StatusOr<ConvProblem> make_problem(std::string_view text, const ProblemOverrides& flags,
                                   const ProblemOverrides& defaults) {
  CONVPLAN_ASSIGN_OR_RETURN(ConvProblem p, parse_problem(text));
  return apply_overrides(std::move(p), given_fields(text), flags, defaults);
}

}  // namespace convplan::cli
