// TuningDatabase::open on a file holding arbitrary bytes (a damaged, foreign or truncated
// database). The contract (tuning_db.h): it does not crash, and it either opens the file or moves
// it aside (never deletes it) and starts a new one. So here open() must succeed; a file moved
// aside must still hold exactly the bytes given; and the database it opened must work: list and
// verify answer (skipping bad rows), every listed record is found by its key, and a new record
// can be stored and read back.
//
// Each input gets a fresh private folder's worth of files (the folder is emptied between inputs),
// so a crash reproduces from its input alone. The folder is made under $TMPDIR (else /tmp) and
// removed at exit (a crash leaves it behind, with the files of the crashing input).
#include <dirent.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "convplan/tuning_db.h"
#include "fuzz_check.h"
#include "same_record.h"

namespace {

void empty_folder(const std::string& path);
void remove_folder();

// Never destroyed: remove_folder runs at exit, after function-local statics would be gone.
const std::string& folder() {
  static const std::string& path = *new std::string([] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/convplan-fuzz-db-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      convplan::fuzz::fail(__FILE__, __LINE__, "mkdtemp", pattern);
    }
    std::atexit(remove_folder);
    return pattern;
  }());
  return path;
}

void remove_folder() {
  empty_folder(folder());
  rmdir(folder().c_str());
}

void empty_folder(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  for (const std::string& name : names) std::remove((path + "/" + name).c_str());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Said beside an open() that failed: CI once saw one that did not reproduce on a machine with
// room to spare, and a full disk is the environment's failure, not the library's.
std::string free_space(const std::string& path) {
  struct statvfs fs;
  if (statvfs(path.c_str(), &fs) != 0) return "free space in " + path + ": unknown";
  const unsigned long long free_kib =
      static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize / 1024;
  return "free space in " + path + ": " + std::to_string(free_kib) + " KiB, " +
         std::to_string(fs.f_favail) + " inodes";
}

convplan::TuningRecord probe_record() {
  convplan::TuningRecord r;
  r.device_model = "NVIDIA H200|sm90|sms132|cudnn91900";
  r.problem = "g1mb1ic8ih8iw8oc8oh8ow8kh3kw3ph1pw1";
  r.policy = "mode=limited";
  r.convplan_version = convplan::convplan_version();
  r.config.engine_id = 7;
  r.config.knobs = {{3, 1}};
  r.time_ms = 0.5;
  r.tuned_at_unix = 1700000000;
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convplan;
  const std::string& dir = folder();
  empty_folder(dir);
  const std::string path = dir + "/tuning.db";
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    CONVPLAN_FUZZ_CHECK(out.good(), "cannot write " + path);
  }

  StatusOr<std::unique_ptr<TuningDatabase>> opened = TuningDatabase::open(path);
  CONVPLAN_FUZZ_CHECK(opened.ok(), "open() neither opened the file nor moved it aside: " +
                                       opened.status().to_string() + " (" + free_space(dir) + ")");
  std::unique_ptr<TuningDatabase> db = std::move(opened).value();
  const DbOpenReport report = db->report();
  if (!report.moved_aside.empty()) {
    CONVPLAN_FUZZ_CHECK(read_file(report.moved_aside) == bytes,
                        "the file moved aside to " + report.moved_aside + " lost its bytes");
  }
  const std::string context =
      "\nopen report: moved_aside='" + report.moved_aside + "' reason='" + report.reason + "'";

  // Damage that open()'s check did not see may still surface later, but only as kCorruptData.
  auto acceptable = [](const Status& s) { return s.ok() || s.code() == StatusCode::kCorruptData; };
  int64_t skipped = 0;
  StatusOr<std::vector<TuningRecord>> records = db->list(&skipped);
  CONVPLAN_FUZZ_CHECK(acceptable(records.status()),
                      "list(): " + records.status().to_string() + context);
  if (records.ok()) {
    for (const TuningRecord& r : *records) {
      StatusOr<TuningRecord> found = db->find(r.key());
      CONVPLAN_FUZZ_CHECK(acceptable(found.status()),
                          "find(): " + found.status().to_string() + context);
      CONVPLAN_FUZZ_CHECK(!found.ok() || fuzz::same_record(*found, r),
                          "find(key) returns another record than list() for " + r.key() + context);
    }
  }
  StatusOr<DbVerifyReport> verified = db->verify();
  CONVPLAN_FUZZ_CHECK(acceptable(verified.status()),
                      "verify(): " + verified.status().to_string() + context);
  StatusOr<TuningRecord> missing = db->find("no such key");
  CONVPLAN_FUZZ_CHECK(!missing.ok(), "find() of a key never stored returned a record" + context);

  const TuningRecord probe = probe_record();
  const Status put = db->put(probe);
  CONVPLAN_FUZZ_CHECK(acceptable(put), "put(): " + put.to_string() + context);
  if (put.ok()) {
    StatusOr<TuningRecord> back = db->find(probe.key());
    CONVPLAN_FUZZ_CHECK(back.ok() && *back == probe, "a record just stored is not found again: " +
                                                         back.status().to_string() + context);
  }
  db.reset();
  empty_folder(dir);
  return 0;
}
