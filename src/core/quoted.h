// quoted(): 'text' for error messages. Built by appending, not as "'" + std::string(text): GCC 12
// at -O3 inlines that operator+ into an insert at offset 0 and reports a false -Wrestrict
// (GCC bug 105651), which fails a Release build with CONVPLAN_WERROR.
#pragma once

#include <string>
#include <string_view>

namespace convplan::detail {

inline std::string quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '\'';
  out += text;
  out += '\'';
  return out;
}

}  // namespace convplan::detail
