#include "known_rates.h"

#include <utility>

#include "report.h"

namespace convplan::cli {

void KnownRates::put(const std::string& name, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  by_name_[name] = value;
}

std::optional<double> KnownRates::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::string matrix_rate_name(DataType data_type, bool tensor_cores) {
  return std::string("matrix_tflops:") + to_string(data_type) + (tensor_cores ? ":tc" : ":notc");
}

std::function<double(const ConvProblem&)> roofline_floor_source(
    std::shared_ptr<const KnownRates> known, TuningDatabase* db, std::string model) {
  return [known = std::move(known), db, model = std::move(model)](const ConvProblem& p) {
    auto rate = [&](const std::string& name) -> double {
      if (std::optional<double> r = known->find(name)) return *r;
      if (db == nullptr) return -1;
      StatusOr<DeviceRate> kept = db->find_device_rate(model, name);
      return kept.ok() ? kept->value : -1;
    };
    Rates rates;
    rates.copy_gbps = rate("copy_gbps");
    rates.matrix_tflops = rate(matrix_rate_name(p.data_type, p.allow_tensor_cores));
    if (rates.copy_gbps <= 0 || rates.matrix_tflops <= 0) return -1.0;
    return roofline_floor_ms(p, rates);
  };
}

}  // namespace convplan::cli
