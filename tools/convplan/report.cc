#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <ostream>

namespace convplan::cli {

Table::Table(std::vector<std::string> header, std::vector<bool> right_aligned)
    : header_(std::move(header)), right_(std::move(right_aligned)) {
  right_.resize(header_.size(), false);
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(header_.size());
  rows_.push_back(std::move(cells));
}

void Table::add_separator() { rows_.emplace_back(); }

void Table::print(std::ostream& out) const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (c > 0) s += "  ";
      s += right_[c] ? pad + cells[c] : cells[c] + (c + 1 < cells.size() ? pad : "");
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << '\n';
  };
  line(header_);
  size_t total = 0;
  for (size_t w : width) total += w;
  total += 2 * (width.empty() ? 0 : width.size() - 1);
  for (const auto& row : rows_) {
    if (row.empty()) {
      out << std::string(total, '-') << '\n';
    } else {
      line(row);
    }
  }
}

std::string fixed(double v, int digits) {
  if (v < 0 || !std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string human_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[u]);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += ',';
    out += csv_field(fields[i]);
  }
  return out + "\n";
}

nlohmann::json problem_json(const ConvProblem& p) {
  auto dims = [&](const SpatialDims& v) {
    nlohmann::json a = nlohmann::json::array();
    for (int d = 0; d < p.spatial_dims; ++d) a.push_back(v[d]);
    return a;
  };
  nlohmann::json j;
  j["descriptor"] = p.to_string();
  j["direction"] = to_string(p.direction);
  j["spatial_dims"] = p.spatial_dims;
  j["n"] = p.n;
  j["c"] = p.c;
  j["k"] = p.k;
  j["groups"] = p.groups;
  j["input"] = dims(p.input);
  j["filter"] = dims(p.filter);
  j["output"] = dims(p.output());
  j["pad_before"] = dims(p.pad_before);
  j["pad_after"] = dims(p.pad_after);
  j["stride"] = dims(p.stride);
  j["dilation"] = dims(p.dilation);
  j["data_type"] = to_string(p.data_type);
  j["compute_type"] = to_string(p.compute_type);
  j["layout"] = to_string(p.layout);
  j["allow_tensor_cores"] = p.allow_tensor_cores;
  j["alpha"] = p.alpha;
  j["beta"] = p.beta;
  j["flops"] = p.flops();
  j["min_bytes"] = p.min_bytes();
  return j;
}

TimeSummary summarize(std::vector<float> times) {
  TimeSummary s;
  if (times.empty()) return s;
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  auto at = [&](double q) {  // nearest rank
    size_t i = static_cast<size_t>(std::lround(q * static_cast<double>(n - 1)));
    return static_cast<double>(times[std::min(i, n - 1)]);
  };
  s.runs = static_cast<int>(n);
  s.median_ms = n % 2 == 1 ? times[n / 2] : 0.5 * (double(times[n / 2 - 1]) + times[n / 2]);
  s.min_ms = times.front();
  s.max_ms = times.back();
  s.p10_ms = at(0.1);
  s.p90_ms = at(0.9);
  return s;
}

double roofline_floor_ms(const ConvProblem& p, const Rates& rates) {
  if (rates.matrix_tflops <= 0 || rates.copy_gbps <= 0) return -1;
  const double compute_ms = p.flops() / (rates.matrix_tflops * 1e12) * 1e3;
  const double memory_ms = p.min_bytes() / (rates.copy_gbps * 1e9) * 1e3;
  return std::max(compute_ms, memory_ms);
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Status write_text(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text;
    std::cout.flush();
    return std::cout ? ok_status()
                     : Status(StatusCode::kIoError, "cannot write to standard output");
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status(StatusCode::kIoError, "cannot open '" + path + "' for writing");
  out << text;
  out.close();
  if (!out) return Status(StatusCode::kIoError, "cannot write '" + path + "'");
  return ok_status();
}

std::string knobs_text(const EngineConfig& config) {
  std::string out;
  for (const KnobChoice& k : config.knobs) {
    if (!out.empty()) out += ' ';
    out += knob_type_name(k.type) + "=" + std::to_string(k.value);
  }
  return out.empty() ? "(none)" : out;
}

nlohmann::json knobs_json(const EngineConfig& config) {
  nlohmann::json a = nlohmann::json::array();
  for (const KnobChoice& k : config.knobs) {
    a.push_back({{"type", k.type}, {"name", knob_type_name(k.type)}, {"value", k.value}});
  }
  return a;
}

}  // namespace convplan::cli
