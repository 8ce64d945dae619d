#include <iostream>

#include "commands.h"

namespace convplan::cli {

int fail(int code, const std::string& message) {
  std::cerr << "convplan: " << message << "\n";
  return code;
}

ProblemOverrides ProblemFlags::overrides() const {
  ProblemOverrides o;
  if (!direction.empty()) o.direction = *parse_direction(direction);
  if (!data_type.empty()) o.data_type = *parse_data_type(data_type);
  if (!layout.empty()) o.layout = *parse_layout(layout);
  o.batch = batch;
  return o;
}

}  // namespace convplan::cli
