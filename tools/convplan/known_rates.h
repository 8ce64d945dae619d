// The machine's rates that the tuner's roofline floor reads (TunerOptions::roofline_floor_ms):
// those a CLI session measured or was given, else those kept in the tuning database.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "convplan/problem.h"
#include "convplan/tuning_db.h"

namespace convplan::cli {

// Rates of the machine by the tuning database's names ("copy_gbps", "matrix_tflops:bf16:tc"),
// read by the tuner from the threads of PlanCache::prepare.
class KnownRates {
 public:
  void put(const std::string& name, double value);
  std::optional<double> find(const std::string& name) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, double> by_name_;
};

// The tuning database's name of the matrix rate of a type, with or without tensor cores.
std::string matrix_rate_name(DataType data_type, bool tensor_cores);

// The tuner's roofline floor (TunerOptions::roofline_floor_ms) from the rates in `known`, else
// those kept in `db` (may be null; must outlive the function) for device model `model`; -1 when
// either rate is missing.
std::function<double(const ConvProblem&)> roofline_floor_source(
    std::shared_ptr<const KnownRates> known, TuningDatabase* db, std::string model);

}  // namespace convplan::cli
