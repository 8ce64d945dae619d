// Records for the db tests, built from plain strings (no problem or policy parser involved), shared
// by the tests and the db_writer program so that both agree on what record `id` holds.
#pragma once

#include <cstdint>
#include <string>

#include "convplan/tuning_record.h"

namespace convplan::testing {

inline constexpr const char kTestDeviceModel[] = "NVIDIA H200|sm90|sms132|cudnn91900";

// Record `id` as written by writer `writer`: the key depends on `id` only, the contents on both,
// so a reader can tell which writer's put() won.
inline TuningRecord make_test_record(int id, int writer = 0) {
  TuningRecord r;
  r.device_model = kTestDeviceModel;
  r.problem = "fwd bf16 nhwc n=8 c=" + std::to_string(64 + id) + " k=128 in=56x56 f=3x3 pad=1x1";
  r.policy = "mode=limited;ws=4294967296;det=0";
  r.convplan_version = "0.1.0-test";
  r.config.engine_id = id % 61;
  r.config.knobs = {{3, id % 4}, {10, writer}, {17, 1}};
  r.notes = static_cast<NoteSet>(kNoteTensorCore |
                                 (id % 2 ? NoteSet{kNoteNonDeterministic} : NoteSet{0}));
  r.time_ms = 0.125 + id / 1024.0;
  r.workspace_bytes = int64_t{1} << (10 + id % 20);
  r.plan_json = "{\"plan\":\"engine " + std::to_string(id) + " by writer " +
                std::to_string(writer) + "\",\"quote\":\"\\\"\",\"unicode\":\"\u00e9\u4e2d\"}";
  r.tuned_at_unix = 1700000000 + id;
  r.tuning_ms = 350.5 + writer;
  for (int c = 0; c < 3; ++c) {
    CandidateResult cand;
    cand.config.engine_id = (id + c) % 61;
    if (c == 1) cand.config.knobs = {{2, c}, {5, id}};
    cand.notes = static_cast<NoteSet>(c == 2 ? kNoteFft : kNoteTensorCore);
    cand.rank = c;
    cand.workspace_bytes = c * 4096;
    if (c != 2) cand.times_ms = {0.5f + c, 0.25f + c, 1.0f / 3.0f};
    cand.median_ms = c == 2 ? -1 : 0.5 + c;
    cand.relative_error = c == 2 ? -1 : 1e-7 * (c + 1);
    cand.outcome = c == 2 ? "filtered: engine " + std::to_string(cand.config.engine_id) +
                                " disabled by CONVPLAN_DISABLED_FWD_ENGINES"
                          : "ok";
    r.candidates.push_back(cand);
  }
  return r;
}

}  // namespace convplan::testing
