// RecordKey::parse on arbitrary bytes. Every key that parses must print to a text that parses
// back to the same key, and that text must be a fixed point (the key's one text form).
#include <cstddef>
#include <cstdint>
#include <string>

#include "convplan/record_key.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convplan;
  const std::string_view text = fuzz::as_text(data, size);
  StatusOr<RecordKey> parsed = RecordKey::parse(text);
  if (!parsed.ok()) {
    CONVPLAN_FUZZ_CHECK(!parsed.status().message().empty(), "an error without a message");
    return 0;
  }
  const std::string canonical = parsed->to_string();
  StatusOr<RecordKey> again = RecordKey::parse(canonical);
  CONVPLAN_FUZZ_CHECK(again.ok(), "to_string() does not parse back\ninput: " + std::string(text) +
                                      "\nto_string: " + canonical +
                                      "\nerror: " + again.status().to_string());
  CONVPLAN_FUZZ_CHECK(*again == *parsed, "parse(k.to_string()) != k\ninput: " + std::string(text) +
                                             "\nto_string: " + canonical);
  CONVPLAN_FUZZ_CHECK(again->to_string() == canonical, "to_string is not stable: " + canonical);
  CONVPLAN_FUZZ_CHECK(again->hash() == parsed->hash(), "equal keys hash differently: " + canonical);
  return 0;
}
