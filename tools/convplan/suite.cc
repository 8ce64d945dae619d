#include "suite.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <system_error>
#include <unordered_map>

#include "convplan/input_limits.h"

#include "suites_embedded.h"

namespace convplan::cli {

ProblemOverrides bench_defaults() {
  ProblemOverrides d;
  d.direction = Direction::kForward;
  d.data_type = DataType::kBFloat16;
  d.layout = Layout::kChannelsLast;
  d.batch = 32;
  return d;
}

namespace {

bool valid_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '-';
  });
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const size_t start = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

}  // namespace

int64_t Suite::total_count() const {
  int64_t total = 0;
  for (const SuiteEntry& e : entries) total += e.count;
  return total;
}

StatusOr<Suite> parse_suite(std::string_view text, std::string_view source_name) {
  Suite suite;
  suite.name = std::string(source_name);
  suite.source = std::string(source_name);
  std::map<std::string, int, std::less<>> names;  // name -> line
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    const std::vector<std::string_view> fields = split_fields(line);
    if (fields.empty()) {
      if (end == text.size()) break;
      continue;
    }
    const std::string where = std::string(source_name) + ":" + std::to_string(line_no) + ": ";
    if (fields.size() != 3) {
      return invalid_argument(where + "expected NAME COUNT DESCRIPTOR, found " +
                              std::to_string(fields.size()) + " field" +
                              (fields.size() == 1 ? "" : "s"));
    }
    SuiteEntry e;
    e.line = line_no;
    e.name = std::string(fields[0]);
    if (!valid_name(e.name)) {
      return invalid_argument(where + "name '" + e.name +
                              "' may hold only letters, digits, '_', '.' and '-'");
    }
    if (auto it = names.find(e.name); it != names.end()) {
      return invalid_argument(where + "name '" + e.name + "' is used already on line " +
                              std::to_string(it->second));
    }
    const std::string_view count = fields[1];
    const auto r = std::from_chars(count.data(), count.data() + count.size(), e.count);
    if (r.ec != std::errc() || r.ptr != count.data() + count.size() || e.count < 1 ||
        e.count > kMaxSuiteCount) {
      return invalid_argument(where + "count '" + std::string(count) +
                              "' is not a whole number from 1 to " +
                              std::to_string(kMaxSuiteCount));
    }
    e.descriptor = std::string(fields[2]);
    StatusOr<ConvProblem> problem = parse_problem(e.descriptor);
    if (!problem.ok()) {
      return invalid_argument(where + "descriptor '" + e.descriptor +
                              "': " + problem.status().message());
    }
    e.problem = std::move(problem).value();
    e.given = given_fields(e.descriptor);
    names.emplace(e.name, line_no);
    suite.entries.push_back(std::move(e));
    if (end == text.size()) break;
  }
  if (suite.entries.empty()) {
    return invalid_argument(std::string(source_name) + ": no convolutions in the suite");
  }
  return suite;
}

StatusOr<Suite> load_suite_file(const std::string& path) {
  CONVPLAN_ASSIGN_OR_RETURN(int64_t max_bytes, max_input_bytes());
  CONVPLAN_ASSIGN_OR_RETURN(std::string text, read_input_file(path, "suite file", max_bytes));
  return parse_suite(text, path);
}

std::vector<std::string> builtin_suite_names() {
  std::vector<std::string> names;
  for (const EmbeddedSuite& s : embedded_suites()) names.emplace_back(s.name);
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<Suite> builtin_suite(std::string_view name) {
  for (const EmbeddedSuite& s : embedded_suites()) {
    if (s.name == name) {
      CONVPLAN_ASSIGN_OR_RETURN(Suite suite,
                                parse_suite(s.text, "suites/" + std::string(s.name) + ".txt"));
      suite.name = std::string(name);
      return suite;
    }
  }
  std::string known;
  for (const std::string& n : builtin_suite_names()) known += (known.empty() ? "" : ", ") + n;
  return not_found("no suite named '" + std::string(name) + "' (built in: " + known +
                   "; --file reads your own)");
}

StatusOr<std::vector<SuiteProblem>> suite_problems(const Suite& suite,
                                                   const ProblemOverrides& flags,
                                                   const ProblemOverrides& defaults) {
  std::vector<SuiteProblem> out;
  // Problems already in `out`, by hash: merging stays linear in the suite's length.
  std::unordered_multimap<uint64_t, size_t> seen;
  for (const SuiteEntry& e : suite.entries) {
    StatusOr<ConvProblem> p = apply_overrides(e.problem, e.given, flags, defaults);
    if (!p.ok()) {
      return invalid_argument(suite.source + ":" + std::to_string(e.line) + ": " + e.name + ": " +
                              p.status().message());
    }
    const uint64_t h = p->hash();
    auto [first, last] = seen.equal_range(h);
    auto same =
        std::find_if(first, last, [&](const auto& kv) { return out[kv.second].problem == *p; });
    if (same != last) {
      // Counts are at most kMaxSuiteCount each, so a sum over any file that fits in memory
      // stays far below int64's range.
      out[same->second].count += e.count;
    } else {
      seen.emplace(h, out.size());
      out.push_back(SuiteProblem{e.name, e.count, std::move(p).value()});
    }
  }
  return out;
}

}  // namespace convplan::cli
