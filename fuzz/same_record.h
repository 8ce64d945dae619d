// Equality of TuningRecords for the harnesses' round-trip checks, where NaN equals NaN: the JSON
// form keeps a non-finite number as "nan", "inf" or "-inf" (tuning_record.cc), so a record with a
// NaN time survives a round trip, yet TuningRecord::operator== (defaulted) says it differs from
// itself.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "convplan/tuning_record.h"

namespace convplan::fuzz {

inline bool same_number(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

inline bool same_candidate(const CandidateResult& a, const CandidateResult& b) {
  if (a.times_ms.size() != b.times_ms.size()) return false;
  for (size_t i = 0; i < a.times_ms.size(); ++i) {
    if (!same_number(a.times_ms[i], b.times_ms[i])) return false;
  }
  return a.config == b.config && a.notes == b.notes && a.rank == b.rank &&
         a.workspace_bytes == b.workspace_bytes && same_number(a.median_ms, b.median_ms) &&
         same_number(a.relative_error, b.relative_error) && a.outcome == b.outcome;
}

inline bool same_record(const TuningRecord& a, const TuningRecord& b) {
  if (a.candidates.size() != b.candidates.size()) return false;
  for (size_t i = 0; i < a.candidates.size(); ++i) {
    if (!same_candidate(a.candidates[i], b.candidates[i])) return false;
  }
  return a.device_model == b.device_model && a.problem == b.problem && a.policy == b.policy &&
         a.convplan_version == b.convplan_version && a.config == b.config && a.notes == b.notes &&
         same_number(a.time_ms, b.time_ms) && a.workspace_bytes == b.workspace_bytes &&
         a.plan_json == b.plan_json && a.tuned_at_unix == b.tuned_at_unix &&
         same_number(a.tuning_ms, b.tuning_ms);
}

}  // namespace convplan::fuzz
