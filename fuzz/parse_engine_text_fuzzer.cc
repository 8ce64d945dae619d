// The three small text forms of engine choices, read from environment variables and the CLI:
// EngineConfig::parse ("eng12:k3=1,k10=2"), parse_engine_rules ("5;7:k3=1;12") and parse_notes
// ("fft,winograd"). Each gets the same bytes. What parses must print and parse back to itself
// (EngineConfig and notes have a to_string), and a parsed EngineConfig must be canonical: knobs
// sorted by type, one per type, as the header promises. The same text is then given to
// TunePolicy::from_environment as the value of each CONVPLAN_* variable in turn (not
// CONVPLAN_ERRATA_FILE, which names a file: parse_errata_rules_fuzzer covers its contents).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "convplan/engine_config.h"
#include "convplan/tune_policy.h"
#include "fuzz_check.h"

// The harness decides the environment: none of the variables it sets may come from outside.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const char* name : convplan::kTunePolicyVariables) unsetenv(name);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convplan;
  const std::string_view text = fuzz::as_text(data, size);

  StatusOr<EngineConfig> config = EngineConfig::parse(text);
  if (config.ok()) {
    for (size_t i = 1; i < config->knobs.size(); ++i) {
      CONVPLAN_FUZZ_CHECK(
          config->knobs[i - 1].type < config->knobs[i].type,
          "EngineConfig::parse left knobs unsorted or repeated: " + std::string(text));
    }
    const std::string printed = config->to_string();
    StatusOr<EngineConfig> back = EngineConfig::parse(printed);
    CONVPLAN_FUZZ_CHECK(back.ok() && *back == *config,
                        "EngineConfig::parse(to_string()) != config\ninput: " + std::string(text) +
                            "\nto_string: " + printed);
    CONVPLAN_FUZZ_CHECK(back->to_string() == printed,
                        "EngineConfig::to_string not stable: " + printed);
    for (const KnobChoice& k : config->knobs) (void)knob_type_name(k.type);
  }

  StatusOr<std::vector<EngineRule>> rules = parse_engine_rules(text);
  if (rules.ok()) {
    // Rules come back sorted by knob type (tune_policy.h's EngineRulesTest says so), and a rule
    // disables the configuration that has exactly its engine and knobs.
    for (const EngineRule& r : *rules) {
      for (size_t i = 1; i < r.knobs.size(); ++i) {
        CONVPLAN_FUZZ_CHECK(r.knobs[i - 1].type <= r.knobs[i].type,
                            "parse_engine_rules left knobs unsorted: " + std::string(text));
      }
      CONVPLAN_FUZZ_CHECK(r.matches(EngineConfig{r.engine_id, r.knobs}),
                          "a rule does not match its own configuration: " + std::string(text));
    }
  }

  StatusOr<NoteSet> notes = parse_notes(text);
  if (notes.ok()) {
    const std::string printed = notes_to_string(*notes);
    StatusOr<NoteSet> back = parse_notes(printed);
    CONVPLAN_FUZZ_CHECK(back.ok() && *back == *notes,
                        "parse_notes(notes_to_string(n)) != n\ninput: " + std::string(text) +
                            "\nprinted: " + printed);
  }
  // Environment values end at the first NUL, as a real environment's do. putenv, not setenv:
  // glibc's setenv keeps every value it was ever given, which would grow without bound here.
  static std::string entry;
  const std::string_view value = text.substr(0, text.find('\0'));
  for (const char* name : kTunePolicyVariables) {
    if (std::string_view(name) == "CONVPLAN_ERRATA_FILE") continue;  // a path (see the header)
    entry = std::string(name) + "=" + std::string(value);
    putenv(entry.data());
    StatusOr<TunePolicy> policy = TunePolicy::from_environment();
    if (policy.ok()) (void)policy->key();
    unsetenv(name);  // takes `entry` out of the environment before it is changed
  }
  return 0;
}
