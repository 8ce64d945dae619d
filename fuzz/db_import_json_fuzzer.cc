// TuningDatabase::import_json on arbitrary bytes, into one in-memory database opened once. Every
// input starts from an empty database (the records of the previous input are pruned), so that a
// crash reproduces from its input alone. What was imported must then be listable, verifiable and
// exportable, and the export must import again with the same count.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "convplan/input_limits.h"
#include "convplan/tuning_db.h"
#include "fuzz_check.h"
#include "same_record.h"

namespace {

convplan::TuningDatabase& database() {
  static std::unique_ptr<convplan::TuningDatabase> db = [] {
    // A small size limit, so that the fuzzer reaches the refusal of documents that exceed it
    // (the default, 256 MiB, is beyond any input it makes).
    ::setenv("CONVPLAN_MAX_INPUT_BYTES", "6K", 1);
    auto opened = convplan::TuningDatabase::open(":memory:");
    if (!opened.ok())
      convplan::fuzz::fail(__FILE__, __LINE__, "open(\":memory:\")", opened.status().to_string());
    return std::move(opened).value();
  }();
  return *db;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convplan;
  TuningDatabase& db = database();
  const std::string_view text = fuzz::as_text(data, size);
  // The last byte picks merge or replace, so both paths see every kind of document.
  const bool keep_existing = size > 0 && (data[size - 1] & 1) != 0;
  StatusOr<int64_t> imported = db.import_json(text, keep_existing);
  if (imported.ok()) {
    CONVPLAN_FUZZ_CHECK(*imported >= 0, "import_json returned a negative count");
    StatusOr<std::vector<TuningRecord>> records = db.list();
    CONVPLAN_FUZZ_CHECK(records.ok(),
                        "list() after an import failed: " + records.status().to_string());
    // Records sharing a key count once, so the count is exactly what the database holds.
    CONVPLAN_FUZZ_CHECK(
        static_cast<int64_t>(records->size()) == *imported,
        "import_json's count differs from the records it left in the empty database");
    CONVPLAN_FUZZ_CHECK(size <= 6 * 1024, "a document over CONVPLAN_MAX_INPUT_BYTES was imported");
    CONVPLAN_FUZZ_CHECK(check_json_nesting(text, "fuzz").ok(),
                        "a document nested too deep was imported");
    for (const TuningRecord& r : *records) {
      StatusOr<TuningRecord> found = db.find(r.key());
      CONVPLAN_FUZZ_CHECK(found.ok() && fuzz::same_record(*found, r),
                          "find(key) does not return the listed record " + r.key());
    }
    StatusOr<DbVerifyReport> report = db.verify();
    CONVPLAN_FUZZ_CHECK(report.ok() && report->problems.empty() && report->valid == report->records,
                        "verify() finds problems in freshly imported records");
    StatusOr<std::string> exported = db.export_json();
    CONVPLAN_FUZZ_CHECK(exported.ok(), "export_json failed: " + exported.status().to_string());
    StatusOr<int64_t> again = db.import_json(*exported, /*keep_existing=*/false);
    CONVPLAN_FUZZ_CHECK(exported->size() > 6 * 1024 ||
                            (again.ok() && *again == static_cast<int64_t>(records->size())),
                        "the export does not import again with the same count\n" + *exported);
  }
  StatusOr<int64_t> pruned = db.prune(PruneFilter{});
  CONVPLAN_FUZZ_CHECK(pruned.ok(), "prune(all) failed: " + pruned.status().to_string());
  return 0;
}
