// The suite files of suites/, compiled into the program by embed_suites.cmake, so that
// `convplan bench --suite NAME` works from any folder and on a machine without the sources.
#pragma once

#include <string_view>
#include <vector>

namespace convplan::cli {

struct EmbeddedSuite {
  std::string_view name;  // the file name without ".txt"
  std::string_view text;  // the file's contents
};
const std::vector<EmbeddedSuite>& embedded_suites();

}  // namespace convplan::cli
