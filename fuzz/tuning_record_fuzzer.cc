// tuning_record_from_json on arbitrary bytes (a record read from the database or an import).
// What parses must survive a round trip: from_json(to_json(r)) == r, and to_json is a fixed point.
#include <cstddef>
#include <cstdint>
#include <string>

#include "convplan/tuning_record.h"
#include "fuzz_check.h"
#include "same_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convplan;
  const std::string_view text = fuzz::as_text(data, size);
  StatusOr<TuningRecord> record = tuning_record_from_json(text);
  if (!record.ok()) {
    CONVPLAN_FUZZ_CHECK(!record.status().message().empty(), "an error without a message");
    return 0;
  }
  (void)record->key();
  const std::string json = to_json(*record);
  StatusOr<TuningRecord> back = tuning_record_from_json(json);
  CONVPLAN_FUZZ_CHECK(back.ok(),
                      "to_json's output does not parse back\ninput: " + std::string(text) +
                          "\nto_json: " + json + "\nerror: " + back.status().to_string());
  CONVPLAN_FUZZ_CHECK(fuzz::same_record(*back, *record),
                      "tuning_record_from_json(to_json(r)) != r\ninput: " + std::string(text) +
                          "\nto_json: " + json);
  CONVPLAN_FUZZ_CHECK(to_json(*back) == json,
                      "to_json is not stable\nfirst: " + json + "\nthen: " + to_json(*back));
  return 0;
}
