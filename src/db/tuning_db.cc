// TuningDatabase on SQLite.
//
// Schema, version 1:
//   meta(name TEXT PRIMARY KEY, value TEXT): ('format', 'convplan-tuning'), ('schema_version', '1')
//   records(key TEXT PRIMARY KEY,          -- TuningRecord::key()
//           device_model, cudnn_version,  -- cudnn_version from device_model's "cudnnN" part
//           convplan_version, problem, policy, tuned_at,
//           record_json TEXT,             -- to_json(record)
//           checksum TEXT)                -- "fnv1a64:<16 hex digits>" of record_json
// The columns beside record_json copy fields of the record so that prune() can select on them;
// a row is trusted only when its checksum matches, its JSON parses, the record's key() equals
// the row's key and the copied columns equal the record's fields.
//
// Opening: under an flock on "<path>.lock" (so one process at a time checks and repairs), the
// file is created 0600 if missing, opened, and checked with PRAGMA integrity_check and the meta
// table. A damaged file is moved to "<path>.corrupt-<unix time>"; a file of another format or
// schema version to "<path>.incompatible-<unix time>"; either is replaced by a new database.
// Then WAL (or, on a network file system, a rollback journal), synchronous=FULL (a put() that
// returned survives a crash of the process and of the machine), and a 10 s busy timeout.
//
// Writing: every put / erase / prune / import is one BEGIN IMMEDIATE transaction, retried when
// SQLite still reports the database busy after the timeout.
#include "convplan/tuning_db.h"

#include <pwd.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "convplan/input_limits.h"
#include "convplan/log.h"

#include "core/mutex.h"
#include "db/db_files.h"
#include "db/sqlite_handle.h"

namespace convplan {
namespace {

using detail::sqlite_busy;
using detail::sqlite_status;
using detail::SqliteConnection;
using detail::SqliteStatement;

constexpr const char kFormatName[] = "convplan-tuning";
constexpr int kSchemaVersion = 1;
constexpr int kBusyTimeoutMs = 10000;
constexpr int kBusyRetries = 3;  // further attempts after a busy timeout ran out
constexpr int kOpenLockWaitMs = 30000;

constexpr const char kCreateSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta(name, value) VALUES('format', 'convplan-tuning');
INSERT OR IGNORE INTO meta(name, value) VALUES('schema_version', '1');
CREATE TABLE IF NOT EXISTS records(
  key TEXT PRIMARY KEY NOT NULL,
  device_model TEXT NOT NULL,
  cudnn_version INTEGER,
  convplan_version TEXT NOT NULL,
  problem TEXT NOT NULL,
  policy TEXT NOT NULL,
  tuned_at INTEGER NOT NULL,
  record_json TEXT NOT NULL,
  checksum TEXT NOT NULL);
)sql";

// The columns every reading query selects, in this order (see read_row).
#define CONVPLAN_DB_ROW_COLUMNS                                                                  \
  "key, device_model, cudnn_version, convplan_version, problem, policy, tuned_at, record_json, " \
  "checksum"

constexpr const char kFindSql[] = "SELECT " CONVPLAN_DB_ROW_COLUMNS " FROM records WHERE key = ?1";
constexpr const char kListSql[] = "SELECT " CONVPLAN_DB_ROW_COLUMNS " FROM records ORDER BY key";
constexpr const char kVerifySql[] =
    "SELECT " CONVPLAN_DB_ROW_COLUMNS ", rowid FROM records ORDER BY rowid";
constexpr const char kUpsertSql[] =
    "INSERT INTO records(key, device_model, cudnn_version, convplan_version, problem, policy, "
    "tuned_at, record_json, checksum) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "
    "ON CONFLICT(key) DO UPDATE SET device_model = excluded.device_model, "
    "cudnn_version = excluded.cudnn_version, convplan_version = excluded.convplan_version, "
    "problem = excluded.problem, policy = excluded.policy, tuned_at = excluded.tuned_at, "
    "record_json = excluded.record_json, checksum = excluded.checksum";
constexpr const char kEraseSql[] = "DELETE FROM records WHERE key = ?1";

void warn(const std::string& message) { log(LogLevel::kWarning, message); }

std::string checksum_of(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64 bits
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("fnv1a64:") + hex;
}

// One row of the records table as read.
struct Row {
  std::string key;
  std::string device_model;
  std::optional<int64_t> cudnn_version;
  std::string convplan_version;
  std::string problem;
  std::string policy;
  int64_t tuned_at = 0;
  std::string json;
  std::string checksum;
};

Row read_row(const SqliteStatement& s) {
  Row r;
  r.key = s.column_text(0);
  r.device_model = s.column_text(1);
  if (!s.column_is_null(2)) r.cudnn_version = s.column_int64(2);
  r.convplan_version = s.column_text(3);
  r.problem = s.column_text(4);
  r.policy = s.column_text(5);
  r.tuned_at = s.column_int64(6);
  r.json = s.column_text(7);
  r.checksum = s.column_text(8);
  return r;
}

// The record a row holds, or kCorruptData saying why it cannot be trusted.
StatusOr<TuningRecord> decode_row(const Row& row) {
  auto bad = [&](const std::string& why) {
    return corrupt_data("record '" + row.key + "': " + why);
  };
  const std::string computed = checksum_of(row.json);
  if (row.checksum != computed)
    return bad("checksum mismatch (stored '" + row.checksum + "', contents give '" + computed +
               "')");
  StatusOr<TuningRecord> parsed = tuning_record_from_json(row.json);
  if (!parsed.ok()) return bad(parsed.status().message());
  const TuningRecord& r = *parsed;
  if (r.key() != row.key) return bad("the record inside has the key '" + r.key() + "'");
  if (r.device_model != row.device_model) return bad("device_model column differs from the record");
  if (cudnn_version_of_model(r.device_model) != row.cudnn_version)
    return bad("cudnn_version column differs from the record's device_model");
  if (r.convplan_version != row.convplan_version)
    return bad("convplan_version column differs from the record");
  if (r.problem != row.problem) return bad("problem column differs from the record");
  if (r.policy != row.policy) return bad("policy column differs from the record");
  if (r.tuned_at_unix != row.tuned_at) return bad("tuned_at column differs from the record");
  return parsed;
}

// The JSON to store for `record`, or why it cannot be stored: empty key fields, or key fields
// that do not survive the JSON form unchanged (invalid UTF-8).
Status storable_json(const TuningRecord& record, std::string* json) {
  const std::pair<const char*, const std::string*> parts[] = {
      {"device_model", &record.device_model},
      {"problem", &record.problem},
      {"policy", &record.policy},
      {"convplan_version", &record.convplan_version}};
  for (const auto& [name, value] : parts) {
    if (value->empty())
      return invalid_argument(std::string("tuning record: ") + name + " is empty");
  }
  *json = to_json(record);
  if (json->empty()) return out_of_memory("tuning record: serializing to JSON failed");
  StatusOr<TuningRecord> back = tuning_record_from_json(*json);
  if (!back.ok())
    return internal_error("tuning record does not read back: " + back.status().message());
  if (back->key() != record.key())
    return invalid_argument("tuning record: key '" + record.key() +
                            "' is not valid UTF-8 and would not survive storage");
  return ok_status();
}

struct ImportItem {
  TuningRecord record;
  std::string json;  // as it will be stored
};

struct ImportedDocument {
  std::vector<ImportItem> items;  // in document order, one per key (the last of each key)
  std::vector<std::string> warnings;
  int64_t bad = 0;         // records skipped
  int64_t duplicates = 0;  // records replaced by a later one with the same key
};

// One element of "records": parsed into an item, or a warning.
void take_import_record(const nlohmann::json& value, size_t index, ImportedDocument& out) {
  const std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  StatusOr<TuningRecord> record = tuning_record_from_json(text);
  ImportItem item;
  Status s = record.ok() ? storable_json(*record, &item.json) : record.status();
  if (!s.ok()) {
    ++out.bad;
    out.warnings.push_back("tuning import: records[" + std::to_string(index) +
                           "] skipped: " + s.message());
    return;
  }
  item.record = std::move(record).value();
  out.items.push_back(std::move(item));
}

// Keeps the last item of each key, in document order.
void drop_duplicate_keys(ImportedDocument& doc) {
  std::unordered_map<std::string, size_t> last;
  for (size_t i = 0; i < doc.items.size(); ++i) last[doc.items[i].record.key()] = i;
  if (last.size() == doc.items.size()) return;
  std::vector<ImportItem> kept;
  kept.reserve(last.size());
  for (size_t i = 0; i < doc.items.size(); ++i) {
    if (last[doc.items[i].record.key()] == i) kept.push_back(std::move(doc.items[i]));
  }
  doc.duplicates = static_cast<int64_t>(doc.items.size() - kept.size());
  doc.items = std::move(kept);
  doc.warnings.push_back("tuning import: " + std::to_string(doc.duplicates) + " record" +
                         (doc.duplicates == 1 ? " has" : "s have") +
                         " the key of a later record in the document; the later one is imported");
}

Status check_import_header(const nlohmann::json& doc) {
  if (!doc.is_object()) return invalid_argument("tuning import: the document is not a JSON object");
  auto format = doc.find("format");
  if (format == doc.end() || !format->is_string() || format->get<std::string>() != kFormatName) {
    return invalid_argument(
        "tuning import: format=" + (format == doc.end() ? "missing" : format->dump()) +
        ", expected \"" + kFormatName + "\"");
  }
  auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || version->get<int64_t>() != 1) {
    return not_supported(
        "tuning import: version=" + (version == doc.end() ? "missing" : version->dump()) +
        ", this library reads version 1");
  }
  auto records = doc.find("records");
  if (records == doc.end() || !records->is_array())
    return invalid_argument("tuning import: 'records' is missing or not an array");
  return ok_status();
}

// Parses an export document one record at a time: each element of "records" is turned into a
// record as soon as it is complete and then dropped from the tree, so the memory an import
// needs is the document's text, the records, and one element's tree (not a tree of them all).
// REQUIRES: check_json_limits passed (the depth bounds every recursion here).
StatusOr<ImportedDocument> parse_import(std::string_view json) {
  using Json = nlohmann::json;
  using Event = Json::parse_event_t;
  ImportedDocument out;
  std::string top_key;
  bool in_records = false;
  int records_arrays = 0;
  size_t index = 0;
  Json::parser_callback_t keep = [&](int depth, Event event, Json& parsed) {
    if (depth == 1 && event == Event::key) top_key = parsed.get<std::string>();
    if (depth == 1 && event == Event::array_start && top_key == "records") {
      in_records = true;
      ++records_arrays;
    }
    if (depth == 1 && event == Event::array_end) in_records = false;
    const bool element_done =
        event == Event::object_end || event == Event::array_end || event == Event::value;
    if (in_records && depth == 2 && element_done) {
      take_import_record(parsed, index++, out);
      return false;  // dropped from the tree
    }
    return true;
  };
  try {
    Json doc = Json::parse(json.begin(), json.end(), keep);
    CONVPLAN_RETURN_IF_ERROR(check_import_header(doc));
  } catch (const Json::parse_error& e) {
    return corrupt_data(std::string("tuning import: not valid JSON: ") + e.what());
  } catch (const std::exception& e) {
    return corrupt_data(std::string("tuning import: ") + e.what());
  }
  if (records_arrays > 1) return invalid_argument("tuning import: 'records' is given twice");
  drop_duplicate_keys(out);
  return out;
}

// Runs a statement between reset()s, so that no statement keeps a read transaction open after
// its caller is done (an open one would block checkpoints, and writers in rollback mode).
class StatementRun {
 public:
  explicit StatementRun(SqliteStatement& s) : s_(s) { s_.rewind(); }
  ~StatementRun() { s_.rewind(); }
  StatementRun(const StatementRun&) = delete;
  StatementRun& operator=(const StatementRun&) = delete;

 private:
  SqliteStatement& s_;
};

class SqliteTuningDatabase final : public TuningDatabase {
 public:
  // REQUIRES: !path.empty() and not an in-memory name.
  static StatusOr<std::unique_ptr<TuningDatabase>> open_file(const std::string& path);
  static StatusOr<std::unique_ptr<TuningDatabase>> open_memory();
  static StatusOr<DbVerifyReport> verify_file(const std::string& path);

  const DbOpenReport& report() const override { return report_; }
  StatusOr<TuningRecord> find(const std::string& key) override;
  Status put(const TuningRecord& record) override;
  Status erase(const std::string& key) override;
  StatusOr<std::vector<TuningRecord>> list(int64_t* skipped) override;
  StatusOr<DbVerifyReport> verify() override;
  StatusOr<int64_t> prune(const PruneFilter& filter) override;
  StatusOr<std::string> export_json() override;
  StatusOr<int64_t> import_json(std::string_view json, bool keep_existing) override;
  int64_t skipped_records() const override { return skipped_.load(std::memory_order_relaxed); }
  StatusOr<DeviceRate> find_device_rate(const std::string& device_model,
                                        const std::string& name) override;
  Status put_device_rate(const DeviceRate& rate) override;

 private:
  enum class FileState { kGood, kFresh, kDamaged, kIncompatible };
  struct Check {
    FileState state = FileState::kGood;
    std::string reason;  // for kDamaged and kIncompatible
  };

  // A file in a folder this process cannot write, opened read-only; damage is an error there.
  static StatusOr<std::unique_ptr<TuningDatabase>> open_existing_read_only(
      std::unique_ptr<SqliteTuningDatabase> self);
  // Opens path_ (creating an empty file first), moving a damaged or incompatible file aside
  // (its intact records salvaged) and opening a new one in its place once. Says whether the
  // file opened holds a schema (kGood) or is new (kFresh).
  StatusOr<FileState> open_replacing_damage() REQUIRES(mu_);
  // Opens the connection on path_ and says what the file holds. A non-ok Status is a failure
  // that moving the file aside would not mend (permissions, I/O). They run before the object is
  // shared, under mu_ all the same. The phases, in order:
  Status open_connection(bool read_only) REQUIRES(mu_);
  StatusOr<Check> check_integrity() REQUIRES(mu_);  // pages, b-trees, indexes
  StatusOr<Check> check_writable() REQUIRES(mu_);   // a header SQLite may only read
  StatusOr<Check> check_schema() REQUIRES(mu_);     // meta table, format, version, columns
  StatusOr<Check> open_and_check() REQUIRES(mu_);
  // Reads the intact rows of a damaged file into salvaged_; returns how many rows it read.
  int64_t salvage_rows() REQUIRES(mu_);
  // Writes salvaged_ into the (new) database and clears it.
  Status restore_salvaged() REQUIRES(mu_);
  // The integrity check and every row's check, on the open connection.
  StatusOr<DbVerifyReport> verify_locked() REQUIRES(mu_);
  Status configure_journal(const std::string& network_fs) REQUIRES(mu_);
  Status create_schema() REQUIRES(mu_);
  int prepare_statements() REQUIRES(mu_);
  void close_connection() REQUIRES(mu_);

  Status error(int rc, const std::string& what) const REQUIRES(mu_) {
    return sqlite_status(db_.get(), rc, "tuning database " + label() + ": " + what);
  }
  // integrity_check could not read a page for the environment's reason `code` (the connection's
  // own message would be the last step's, "another row available").
  Status unreadable_page(int code) const {
    return sqlite_status(nullptr, code,
                         "tuning database " + label() + ": integrity_check could not read a page");
  }
  // SQLite's name for `rc`, and its message for the last call when that says more.
  std::string describe(int rc) const REQUIRES(mu_) {
    std::string text = detail::sqlite_error_name(rc);
    std::string last = db_.last_message();
    if (last != "not an error" && text.find(last) == std::string::npos) text += ": " + last;
    return text;
  }
  std::string label() const { return path_.empty() ? "(in memory)" : "'" + path_ + "'"; }

  // Runs `body` (which returns a SQLite result code and may be run again) in one BEGIN
  // IMMEDIATE transaction, retrying while the database stays busy.
  template <typename Body>
  Status write_transaction(const std::string& what, Body&& body) REQUIRES(mu_);
  // Inserts or replaces `record` (already serialized as `json`). With keep_existing, an intact
  // row under the same key is kept and *written is false. In a transaction.
  int upsert(const TuningRecord& record, const std::string& json, bool keep_existing, bool* written)
      REQUIRES(mu_);
  // Reads every row of `stmt` (a kListSql-shaped query).
  int read_rows(SqliteStatement& stmt, std::vector<Row>* rows) REQUIRES(mu_);

  std::string path_;  // the canonical path; "" for in-memory; immutable after open
  DbOpenReport report_;
  bool read_only_ = false;     // opened in a folder this process cannot write
  bool immutable_ = false;     // read_only_, and SQLite may not use locks or a -shm file
  std::vector<Row> salvaged_;  // during open only
  std::atomic<int64_t> skipped_{0};

  mutable Mutex mu_;
  // Declared before the statements so that they are finalized first.
  SqliteConnection db_ GUARDED_BY(mu_);
  SqliteStatement find_ GUARDED_BY(mu_);
  SqliteStatement list_ GUARDED_BY(mu_);
  SqliteStatement upsert_ GUARDED_BY(mu_);
  SqliteStatement erase_ GUARDED_BY(mu_);
};

void SqliteTuningDatabase::close_connection() {
  find_ = SqliteStatement();
  list_ = SqliteStatement();
  upsert_ = SqliteStatement();
  erase_ = SqliteStatement();
  db_.close();
}

int SqliteTuningDatabase::prepare_statements() {
  int rc = db_.prepare(kFindSql, &find_);
  if (rc == SQLITE_OK) rc = db_.prepare(kListSql, &list_);
  if (rc == SQLITE_OK) rc = db_.prepare(kUpsertSql, &upsert_);
  if (rc == SQLITE_OK) rc = db_.prepare(kEraseSql, &erase_);
  return rc;
}

// "file:<path>?immutable=1", every byte of the path but the unreserved ones percent-encoded.
std::string immutable_uri(const std::string& path) {
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
      uri += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      uri += hex;
    }
  }
  return uri + "?immutable=1";
}

Status SqliteTuningDatabase::open_connection(bool read_only) {
  // NOFOLLOW: the file itself is never a link (check_database_files refused one; this closes
  // the window after it). No SQLITE_OPEN_URI for the user's path: path_ is absolute, so never a
  // "file:" URI; only the immutable form below is one, built here from the encoded path.
  int flags = (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOMUTEX |
              SQLITE_OPEN_NOFOLLOW;
  if (immutable_) flags |= SQLITE_OPEN_URI;
  std::string message;
  int rc = db_.open(immutable_ ? immutable_uri(path_) : path_, flags, &message);
  if (rc != SQLITE_OK) {
    return sqlite_status(nullptr, rc, "tuning database " + label() + ": cannot open: " + message);
  }
  sqlite3_busy_timeout(db_.get(), kBusyTimeoutMs);
  return ok_status();
}

// kOutOfMemoryWithMemoryToSpare included: its primary code is SQLITE_CORRUPT.
bool is_damage(int code) {
  return (code & 0xff) == SQLITE_NOTADB || (code & 0xff) == SQLITE_CORRUPT;
}

// The check itself failing is damage (an unknown schema format number: SQLITE_ERROR "unsupported
// file format"; a record claiming a huge blob: SQLITE_TOOBIG), unless the cause is the
// environment rather than the file.
bool environmental_failure(int code) {
  switch (code & 0xff) {
    case SQLITE_NOMEM:  // a shortage: with memory to spare, the wrappers returned damage
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_FULL:
    case SQLITE_PERM:
    case SQLITE_INTERRUPT:
    case SQLITE_READONLY: return true;
    default: return false;
  }
}

// integrity_check reports a page it could not read as a complaint ("unable to get the page. error
// code=7") whatever the cause; out of memory (unless memory is to spare) or an I/O error is the
// environment's failure, not damage. The first such code in `complaints`, or SQLITE_OK.
int environmental_code_in(std::string_view complaints) {
  constexpr std::string_view kMarker = "error code";
  for (size_t at = complaints.find(kMarker); at != std::string_view::npos;
       at = complaints.find(kMarker, at + 1)) {
    const char* digits = complaints.data() + at + kMarker.size();
    const char* end = complaints.data() + complaints.size();
    if (digits < end && (*digits == '=' || *digits == ' ')) ++digits;
    int code = SQLITE_OK;
    if (std::from_chars(digits, end, code).ec != std::errc()) continue;
    code = detail::blame_file_for_spurious_nomem(code);
    if (environmental_failure(code)) return code;
  }
  return SQLITE_OK;
}

StatusOr<SqliteTuningDatabase::Check> SqliteTuningDatabase::check_integrity() {
  // integrity_check reads every page: it finds a file that is not a database, a truncated one,
  // damaged b-trees and indexes that disagree with their tables (quick_check misses those). Up
  // to 5 of its complaints go into the reason.
  SqliteStatement check;
  int rc = db_.prepare("PRAGMA integrity_check(5)", &check);
  std::string complaints;
  if (rc == SQLITE_OK) {
    while ((rc = check.step()) == SQLITE_ROW) {
      std::string line = check.column_text(0);
      if (line == "ok") continue;
      if (!complaints.empty()) complaints += "; ";
      complaints += line;
    }
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
  }
  if (rc != SQLITE_OK) {
    if (environmental_failure(rc)) return error(rc, "integrity_check");
    return Check{FileState::kDamaged, describe(rc)};
  }
  if (const int code = environmental_code_in(complaints); code != SQLITE_OK) {
    return unreadable_page(code);
  }
  if (!complaints.empty()) return Check{FileState::kDamaged, "integrity_check: " + complaints};
  return Check{};
}

StatusOr<SqliteTuningDatabase::Check> SqliteTuningDatabase::check_writable() {
  // SQLite opens read-only a file whose header has a write format version it does not know
  // (byte 18 above 2), and a file this user may not write; every put would then fail.
  if (read_only_ || sqlite3_db_readonly(db_.get(), "main") != 1) return Check{};
  if (access(path_.c_str(), W_OK) != 0) {
    return Status(StatusCode::kIoError,
                  "tuning database " + label() + " is not writable: " + std::strerror(errno));
  }
  return Check{FileState::kIncompatible,
               "SQLite can only read it (its header's write format version is one SQLite does "
               "not know)"};
}

StatusOr<SqliteTuningDatabase::Check> SqliteTuningDatabase::check_schema() {
  auto damaged = [](std::string why) { return Check{FileState::kDamaged, std::move(why)}; };
  auto incompatible = [](std::string why) {
    return Check{FileState::kIncompatible, std::move(why)};
  };
  SqliteStatement tables;
  int rc = db_.prepare("SELECT count(*) FROM sqlite_schema", &tables);
  if (rc == SQLITE_OK) rc = tables.step();
  if (is_damage(rc)) return damaged(describe(rc));
  if (rc != SQLITE_ROW) return error(rc, "reading the schema");
  const int64_t table_count = tables.column_int64(0);
  tables = SqliteStatement();
  if (table_count == 0) return Check{FileState::kFresh, ""};

  SqliteStatement meta;
  rc = db_.prepare("SELECT name, value FROM meta", &meta);
  if (rc != SQLITE_OK) {
    if (is_damage(rc)) return damaged(db_.last_message());
    if (environmental_failure(rc)) return error(rc, "reading the meta table");
    return incompatible("not a convplan tuning database (no meta table: " + db_.last_message() +
                        ")");
  }
  std::optional<std::string> format, version;
  while ((rc = meta.step()) == SQLITE_ROW) {
    std::string name = meta.column_text(0);
    if (name == "format") format = meta.column_text(1);
    if (name == "schema_version") version = meta.column_text(1);
  }
  if (is_damage(rc)) return damaged(db_.last_message());
  if (rc != SQLITE_DONE) return error(rc, "reading the meta table");
  meta = SqliteStatement();
  if (format != kFormatName) {
    return incompatible("not a convplan tuning database (meta format='" + format.value_or("") +
                        "', expected '" + kFormatName + "')");
  }
  if (version != std::to_string(kSchemaVersion)) {
    return incompatible("schema version '" + version.value_or("") + "', this library (convplan " +
                        convplan_version() + ") reads version " + std::to_string(kSchemaVersion));
  }
  rc = prepare_statements();
  if (rc != SQLITE_OK) {
    if (is_damage(rc)) return damaged(db_.last_message());
    if (environmental_failure(rc)) return error(rc, "preparing statements");
    return incompatible("records table does not have schema version 1's columns (" +
                        db_.last_message() + ")");
  }
  return Check{};
}

StatusOr<SqliteTuningDatabase::Check> SqliteTuningDatabase::open_and_check() {
  CONVPLAN_RETURN_IF_ERROR(open_connection(read_only_));
  CONVPLAN_ASSIGN_OR_RETURN(Check integrity, check_integrity());
  if (integrity.state != FileState::kGood) return integrity;
  CONVPLAN_ASSIGN_OR_RETURN(Check writable, check_writable());
  if (writable.state != FileState::kGood) return writable;
  return check_schema();
}

int64_t SqliteTuningDatabase::salvage_rows() {
  // The table's own b-tree, not an index: damage confined to an index leaves every row readable.
  SqliteStatement rows;
  salvaged_.clear();
  if (db_.prepare("SELECT " CONVPLAN_DB_ROW_COLUMNS " FROM records NOT INDEXED ORDER BY rowid",
                  &rows) != SQLITE_OK) {
    return 0;
  }
  int64_t seen = 0;
  while (rows.step() == SQLITE_ROW) {  // stops at the first page it cannot read
    ++seen;
    Row row = read_row(rows);
    if (decode_row(row).ok()) salvaged_.push_back(std::move(row));
  }
  return seen;
}

Status SqliteTuningDatabase::restore_salvaged() {
  if (salvaged_.empty()) return ok_status();
  Status s = write_transaction("restoring the salvaged records", [&]() REQUIRES(mu_) {
    for (const Row& row : salvaged_) {
      StatusOr<TuningRecord> record = decode_row(row);
      bool written = false;
      int rc = upsert(*record, row.json, /*keep_existing=*/false, &written);
      if (rc != SQLITE_OK) return rc;
    }
    return SQLITE_OK;
  });
  salvaged_.clear();
  return s;
}

StatusOr<SqliteTuningDatabase::FileState> SqliteTuningDatabase::open_replacing_damage() {
  for (int attempt = 0;; ++attempt) {
    CONVPLAN_RETURN_IF_ERROR(detail::create_private_file(path_));
    CONVPLAN_ASSIGN_OR_RETURN(Check check, open_and_check());
    if (check.state == FileState::kGood || check.state == FileState::kFresh) return check.state;
    if (attempt > 0) {
      close_connection();
      return corrupt_data("tuning database " + label() +
                          ": a new database made there is unusable: " + check.reason);
    }
    const bool damaged = check.state == FileState::kDamaged;
    int64_t seen = 0;
    if (damaged) seen = salvage_rows();
    close_connection();
    CONVPLAN_ASSIGN_OR_RETURN(std::string aside,
                              detail::move_aside(path_, damaged ? "corrupt" : "incompatible"));
    report_.moved_aside = aside;
    report_.reason = (damaged ? "damaged: " : "") + check.reason;
    report_.salvaged = static_cast<int64_t>(salvaged_.size());
    std::string saved;
    if (damaged) {
      saved = "; " + std::to_string(salvaged_.size()) + " of the " + std::to_string(seen) +
              " records it could read were intact and are copied into the new one";
    }
    warn("tuning database '" + report_.path + "' " + (damaged ? "is damaged" : "is unusable") +
         " (" + check.reason + "); moved it aside to '" + aside + "' and started a new one" +
         saved);
  }
}

Status SqliteTuningDatabase::configure_journal(const std::string& network_fs) {
  const char* wanted = network_fs.empty() ? "wal" : "delete";
  SqliteStatement mode;
  int rc = db_.prepare(
      network_fs.empty() ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE", &mode);
  std::string got;
  if (rc == SQLITE_OK && (rc = mode.step()) == SQLITE_ROW) {
    got = mode.column_text(0);
    rc = SQLITE_OK;
  }
  mode = SqliteStatement();
  std::string note;
  if (!network_fs.empty()) {
    note = "the file is on a network file system (" + network_fs +
           "): using a rollback journal, not WAL";
  }
  if (rc != SQLITE_OK || got != wanted) {
    if (!note.empty()) note += "; ";
    note += std::string("journal_mode=") + wanted + " was refused (" +
            (rc != SQLITE_OK ? describe(rc) : "mode is '" + got + "'") + ")";
  }
  report_.wal = (got == "wal");
  if (!note.empty()) {
    if (!report_.reason.empty()) report_.reason += "; ";
    report_.reason += note;
    static std::atomic<bool> told{false};  // once per process, however many opens
    if (!told.exchange(true)) warn("tuning database '" + path_ + "': " + note);
  }
  // A put() that returned survives a crash of the process (and, with FULL, of the machine).
  rc = db_.exec("PRAGMA synchronous=FULL");
  if (rc != SQLITE_OK) return error(rc, "PRAGMA synchronous=FULL");
  return ok_status();
}

Status SqliteTuningDatabase::create_schema() {
  int rc = db_.exec("BEGIN IMMEDIATE");
  if (rc != SQLITE_OK) return error(rc, "BEGIN (creating the schema)");
  rc = db_.exec(kCreateSchema);
  if (rc == SQLITE_OK) rc = db_.exec("COMMIT");
  if (rc != SQLITE_OK) {
    Status s = error(rc, "creating the schema");
    db_.exec("ROLLBACK");
    return s;
  }
  return ok_status();
}

StatusOr<std::unique_ptr<TuningDatabase>> SqliteTuningDatabase::open_memory() {
  auto self = std::make_unique<SqliteTuningDatabase>();
  MutexLock opening(self->mu_);  // not shared yet: for the analysis
  std::string message;
  int rc = self->db_.open(
      ":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, &message);
  if (rc != SQLITE_OK) return sqlite_status(nullptr, rc, "in-memory tuning database: " + message);
  self->report_.reason = "in-memory database: records last as long as this object";
  CONVPLAN_RETURN_IF_ERROR(self->create_schema());
  rc = self->prepare_statements();
  if (rc != SQLITE_OK) return self->error(rc, "preparing statements");
  return std::unique_ptr<TuningDatabase>(std::move(self));
}

StatusOr<std::unique_ptr<TuningDatabase>> SqliteTuningDatabase::open_file(const std::string& path) {
  auto self = std::make_unique<SqliteTuningDatabase>();
  self->report_.path = path;
  CONVPLAN_ASSIGN_OR_RETURN(detail::DbEnvironment env, detail::db_environment());
  CONVPLAN_RETURN_IF_ERROR(detail::make_private_folders(path));
  CONVPLAN_ASSIGN_OR_RETURN(self->path_, detail::canonical_database_path(path));
  const std::string folder = detail::parent_folder(self->path_);
  CONVPLAN_RETURN_IF_ERROR(detail::check_private_folder(folder, env.allow_shared_folder));
  CONVPLAN_RETURN_IF_ERROR(detail::check_database_files(self->path_, env.allow_shared_folder));
  // A file this process may read but not write (or in a folder it cannot write) is read as it
  // is: opening it for writing would only get a read-only connection that makes -wal and -shm
  // files of this user's, which can lock the owner out.
  if (access(self->path_.c_str(), R_OK) == 0 &&
      (!detail::folder_writable(folder) || access(self->path_.c_str(), W_OK) != 0)) {
    return open_existing_read_only(std::move(self));
  }
  MutexLock opening(self->mu_);  // not shared yet: for the analysis
  CONVPLAN_ASSIGN_OR_RETURN(const std::string network_fs, detail::network_file_system_name(folder));
  // Held until open returns: checking, moving aside and creating are one step for other processes.
  detail::OpenLock lock(self->path_, kOpenLockWaitMs);
  CONVPLAN_ASSIGN_OR_RETURN(FileState state, self->open_replacing_damage());
  if (std::string loose = detail::loose_mode_warning(self->path_); !loose.empty()) warn(loose);
  CONVPLAN_RETURN_IF_ERROR(self->configure_journal(network_fs));
  if (state == FileState::kFresh) {
    CONVPLAN_RETURN_IF_ERROR(self->create_schema());
    int rc = self->prepare_statements();
    if (rc != SQLITE_OK) return self->error(rc, "preparing statements");
  }
  CONVPLAN_RETURN_IF_ERROR(self->restore_salvaged());
  return std::unique_ptr<TuningDatabase>(std::move(self));
}

StatusOr<std::unique_ptr<TuningDatabase>> SqliteTuningDatabase::open_existing_read_only(
    std::unique_ptr<SqliteTuningDatabase> self) {
  MutexLock opening(self->mu_);  // not shared yet: for the analysis
  // Nothing may be created, moved or repaired in a folder this process cannot write: read what
  // is there, and refuse a file that is damaged rather than hide it.
  self->read_only_ = true;
  self->report_.read_only = true;
  // Without a -shm file already there, SQLite would make one (where the folder lets it) or fail:
  // read the file alone then (immutable mode: no locks, nothing created).
  self->immutable_ = access((self->path_ + "-shm").c_str(), F_OK) != 0;
  StatusOr<Check> checked = self->open_and_check();
  if (!checked.ok() && checked.status().code() == StatusCode::kIoError) {
    // A WAL database whose -shm cannot be made in this folder: read the file alone (SQLite's
    // immutable mode: no locks, no -shm), which is all a process that cannot write here needs.
    self->close_connection();
    self->immutable_ = true;
    checked = self->open_and_check();
  }
  CONVPLAN_ASSIGN_OR_RETURN(Check check, std::move(checked));
  if (check.state == FileState::kFresh) {
    return corrupt_data("tuning database " + self->label() +
                        " is empty and may not be written here: nothing to read");
  }
  if (check.state != FileState::kGood) {
    return corrupt_data("tuning database " + self->label() + " (in a read-only folder) " +
                        (check.state == FileState::kDamaged ? "is damaged: " : "is unusable: ") +
                        check.reason);
  }
  self->report_.reason =
      "opened read-only (it or its folder is not writable): tuning results will not be kept";
  warn("tuning database '" + self->report_.path + "': " + self->report_.reason);
  return std::unique_ptr<TuningDatabase>(std::move(self));
}

template <typename Body>
Status SqliteTuningDatabase::write_transaction(const std::string& what, Body&& body) {
  if (read_only_) {
    return Status(StatusCode::kIoError,
                  "tuning database " + label() + ": " + what +
                      ": opened read-only (it or its folder is not writable)");
  }
  for (int attempt = 0;; ++attempt) {
    int rc = db_.exec("BEGIN IMMEDIATE");
    if (rc == SQLITE_OK) {
      rc = body();
      if (rc == SQLITE_OK) rc = db_.exec("COMMIT");
      if (rc == SQLITE_OK) return ok_status();
    }
    Status failed = error(rc, what);
    if (!sqlite3_get_autocommit(db_.get())) db_.exec("ROLLBACK");
    if (!sqlite_busy(rc) || attempt >= kBusyRetries) return failed;
    std::this_thread::sleep_for(std::chrono::milliseconds(10 * (attempt + 1)));
  }
}

int SqliteTuningDatabase::upsert(const TuningRecord& record, const std::string& json,
                                 bool keep_existing, bool* written) {
  *written = false;
  const std::string key = record.key();
  if (keep_existing) {
    StatementRun run(find_);
    find_.bind_text(1, key);
    int rc = find_.step();
    if (rc == SQLITE_ROW) {
      if (decode_row(read_row(find_)).ok()) return SQLITE_OK;  // an intact record wins
    } else if (rc != SQLITE_DONE) {
      return rc;
    }
  }
  StatementRun run(upsert_);
  upsert_.bind_text(1, key);
  upsert_.bind_text(2, record.device_model);
  if (std::optional<int64_t> v = cudnn_version_of_model(record.device_model)) {
    upsert_.bind_int64(3, *v);
  } else {
    upsert_.bind_null(3);
  }
  upsert_.bind_text(4, record.convplan_version);
  upsert_.bind_text(5, record.problem);
  upsert_.bind_text(6, record.policy);
  upsert_.bind_int64(7, record.tuned_at_unix);
  upsert_.bind_text(8, json);
  upsert_.bind_text(9, checksum_of(json));
  int rc = upsert_.step();
  if (rc != SQLITE_DONE) return rc;
  *written = true;
  return SQLITE_OK;
}

int SqliteTuningDatabase::read_rows(SqliteStatement& stmt, std::vector<Row>* rows) {
  rows->clear();
  StatementRun run(stmt);
  int rc;
  while ((rc = stmt.step()) == SQLITE_ROW) rows->push_back(read_row(stmt));
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

StatusOr<TuningRecord> SqliteTuningDatabase::find(const std::string& key) {
  MutexLock lock(mu_);
  for (int attempt = 0;; ++attempt) {
    StatementRun run(find_);
    find_.bind_text(1, key);
    int rc = find_.step();
    if (rc == SQLITE_DONE)
      return not_found("tuning database " + label() + ": no record under '" + key + "'");
    if (rc == SQLITE_ROW) {
      StatusOr<TuningRecord> record = decode_row(read_row(find_));
      if (!record.ok()) {
        skipped_.fetch_add(1, std::memory_order_relaxed);
        return record.status().with_context("tuning database " + label());
      }
      return record;
    }
    if (!sqlite_busy(rc) || attempt >= kBusyRetries) return error(rc, "find '" + key + "'");
  }
}

Status SqliteTuningDatabase::put(const TuningRecord& record) {
  std::string json;
  CONVPLAN_RETURN_IF_ERROR(storable_json(record, &json));
  MutexLock lock(mu_);
  return write_transaction("put '" + record.key() + "'", [&]() REQUIRES(mu_) {
    bool written = false;
    return upsert(record, json, /*keep_existing=*/false, &written);
  });
}

Status SqliteTuningDatabase::erase(const std::string& key) {
  MutexLock lock(mu_);
  return write_transaction("erase '" + key + "'", [&]() REQUIRES(mu_) {
    StatementRun run(erase_);
    erase_.bind_text(1, key);
    int rc = erase_.step();
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
  });
}

StatusOr<std::vector<TuningRecord>> SqliteTuningDatabase::list(int64_t* skipped) {
  std::vector<Row> rows;
  {
    MutexLock lock(mu_);
    for (int attempt = 0;; ++attempt) {
      int rc = read_rows(list_, &rows);
      if (rc == SQLITE_OK) break;
      if (!sqlite_busy(rc) || attempt >= kBusyRetries) return error(rc, "list");
    }
  }
  std::vector<TuningRecord> records;
  records.reserve(rows.size());
  int64_t bad = 0;
  for (const Row& row : rows) {
    StatusOr<TuningRecord> record = decode_row(row);
    if (record.ok()) {
      records.push_back(std::move(record).value());
    } else {
      ++bad;
    }
  }
  skipped_.fetch_add(bad, std::memory_order_relaxed);
  if (skipped != nullptr) *skipped = bad;
  return records;
}

StatusOr<DbVerifyReport> SqliteTuningDatabase::verify() {
  MutexLock lock(mu_);
  return verify_locked();
}

StatusOr<DbVerifyReport> SqliteTuningDatabase::verify_locked() {
  DbVerifyReport report;
  {
    SqliteStatement check;
    int rc = db_.prepare("PRAGMA integrity_check(100)", &check);
    if (rc == SQLITE_OK) {
      while ((rc = check.step()) == SQLITE_ROW) {
        std::string line = check.column_text(0);
        if (const int code = environmental_code_in(line); code != SQLITE_OK) {
          return unreadable_page(code);
        }
        if (line != "ok") report.problems.push_back("database: " + line);
      }
    }
    if (rc != SQLITE_DONE) {
      if (!is_damage(rc)) return error(rc, "integrity_check");
      report.problems.push_back("database: integrity_check failed: " + describe(rc));
    }
  }
  SqliteStatement rows;
  int rc = db_.prepare(kVerifySql, &rows);
  if (rc != SQLITE_OK && !is_damage(rc) && !environmental_failure(rc)) {
    return corrupt_data("tuning database " + label() + " is not a convplan tuning database (" +
                        describe(rc) + ")");
  }
  if (rc != SQLITE_OK) return error(rc, "verify");
  while ((rc = rows.step()) == SQLITE_ROW) {
    ++report.records;
    Row row = read_row(rows);
    StatusOr<TuningRecord> record = decode_row(row);
    if (record.ok()) {
      ++report.valid;
    } else if (row.key.empty()) {
      report.problems.push_back("rowid " + std::to_string(rows.column_int64(9)) + ": " +
                                record.status().message());
    } else {
      report.problems.push_back(record.status().message());
    }
  }
  if (rc != SQLITE_DONE) {
    if (!is_damage(rc)) return error(rc, "verify");
    report.problems.push_back(std::string("records table: reading stopped after ") +
                              std::to_string(report.records) + " rows: " + describe(rc));
  }
  return report;
}

StatusOr<int64_t> SqliteTuningDatabase::prune(const PruneFilter& filter) {
  std::string sql = "DELETE FROM records WHERE 1";
  if (filter.older_than_unix) sql += " AND tuned_at < ?1";
  if (filter.device_model) sql += " AND device_model = ?2";
  if (filter.cudnn_version) sql += " AND cudnn_version = ?3";
  MutexLock lock(mu_);
  SqliteStatement stmt;
  int rc = db_.prepare(sql, &stmt);
  if (rc != SQLITE_OK) return error(rc, "prune");
  int64_t removed = 0;
  CONVPLAN_RETURN_IF_ERROR(write_transaction("prune", [&]() REQUIRES(mu_) {
    StatementRun run(stmt);
    if (filter.older_than_unix) stmt.bind_int64(1, *filter.older_than_unix);
    if (filter.device_model) stmt.bind_text(2, *filter.device_model);
    if (filter.cudnn_version) stmt.bind_int64(3, *filter.cudnn_version);
    int step = stmt.step();
    if (step != SQLITE_DONE) return step;
    removed = sqlite3_changes64(db_.get());
    return SQLITE_OK;
  }));
  return removed;
}

StatusOr<std::string> SqliteTuningDatabase::export_json() {
  CONVPLAN_ASSIGN_OR_RETURN(std::vector<TuningRecord> records, list(nullptr));
  // One record per line: greppable and diffable, and still one JSON document.
  std::string out = std::string("{\"format\":\"") + kFormatName + "\",\"version\":1,\"records\":[";
  for (size_t i = 0; i < records.size(); ++i) {
    out += i == 0 ? "\n" : ",\n";
    out += to_json(records[i]);
  }
  out += records.empty() ? "]}\n" : "\n]}\n";
  return out;
}

StatusOr<int64_t> SqliteTuningDatabase::import_json(std::string_view json, bool keep_existing) {
  CONVPLAN_ASSIGN_OR_RETURN(int64_t max_bytes, max_input_bytes());
  CONVPLAN_RETURN_IF_ERROR(check_json_limits(json, "tuning import", max_bytes));
  CONVPLAN_ASSIGN_OR_RETURN(ImportedDocument doc, parse_import(json));
  for (const std::string& w : doc.warnings) warn(w);
  skipped_.fetch_add(doc.bad, std::memory_order_relaxed);

  int64_t written_count = 0;
  MutexLock lock(mu_);
  CONVPLAN_RETURN_IF_ERROR(write_transaction("import", [&]() REQUIRES(mu_) {
    written_count = 0;  // the body may be run again after a busy rollback
    for (const ImportItem& item : doc.items) {
      bool written = false;
      int rc = upsert(item.record, item.json, keep_existing, &written);
      if (rc != SQLITE_OK) return rc;
      if (written) ++written_count;
    }
    return SQLITE_OK;
  }));
  return written_count;
}

StatusOr<DbVerifyReport> SqliteTuningDatabase::verify_file(const std::string& path) {
  auto self = std::make_unique<SqliteTuningDatabase>();
  self->report_.path = path;
  CONVPLAN_ASSIGN_OR_RETURN(detail::DbEnvironment env, detail::db_environment());
  CONVPLAN_ASSIGN_OR_RETURN(self->path_, detail::canonical_database_path(path));
  CONVPLAN_RETURN_IF_ERROR(detail::check_database_files(self->path_, env.allow_shared_folder));
  if (access(self->path_.c_str(), F_OK) != 0) {
    return not_found("no tuning database at " + self->label());
  }
  // Read-write where this process may write, so that closing removes any -wal and -shm files
  // that SQLite made while reading (a read-only connection leaves them behind); nothing is
  // written either way.
  self->read_only_ = access(self->path_.c_str(), W_OK) != 0 ||
                     !detail::folder_writable(detail::parent_folder(self->path_));
  self->immutable_ = self->read_only_ && access((self->path_ + "-shm").c_str(), F_OK) != 0;
  MutexLock lock(self->mu_);
  CONVPLAN_RETURN_IF_ERROR(self->open_connection(self->read_only_));
  StatusOr<DbVerifyReport> report = self->verify_locked();
  if (self->read_only_ && !report.ok() && report.status().code() == StatusCode::kIoError) {
    self->close_connection();  // no -shm can be made here: read the file alone
    self->immutable_ = true;
    CONVPLAN_RETURN_IF_ERROR(self->open_connection(true));
    report = self->verify_locked();
  }
  return report;
}

std::string home_folder() {
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') return home;
  struct passwd pw;
  struct passwd* found = nullptr;
  char buffer[4096];
  if (getpwuid_r(getuid(), &pw, buffer, sizeof buffer, &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr && found->pw_dir[0] != '\0') {
    return found->pw_dir;
  }
  return "";
}

}  // namespace

// ---- Device rates (issue 21): a table apart from the records, created on first use, so the
// records' schema (version 1) is unchanged and older files simply gain the table. ----

StatusOr<DeviceRate> TuningDatabase::find_device_rate(const std::string&, const std::string&) {
  return Status(StatusCode::kNotSupported, "this tuning database keeps no device rates");
}
Status TuningDatabase::put_device_rate(const DeviceRate&) {
  return Status(StatusCode::kNotSupported, "this tuning database keeps no device rates");
}

namespace {
constexpr const char* kCreateDeviceRatesSql =
    "CREATE TABLE IF NOT EXISTS device_rates(device_model TEXT NOT NULL, name TEXT NOT NULL, "
    "value REAL NOT NULL, source TEXT NOT NULL, measured_at INTEGER NOT NULL, "
    "PRIMARY KEY(device_model, name))";
}  // namespace

StatusOr<DeviceRate> SqliteTuningDatabase::find_device_rate(const std::string& device_model,
                                                            const std::string& name) {
  MutexLock lock(mu_);
  const std::string what = "device rate '" + name + "' of '" + device_model + "'";
  SqliteStatement q;
  int rc = db_.prepare(
      "SELECT value, source, measured_at FROM device_rates "
      "WHERE device_model = ?1 AND name = ?2",
      &q);
  if (rc != SQLITE_OK) {  // no table yet: nothing was ever stored
    return Status(StatusCode::kNotFound, "no " + what + " (" + db_.last_message() + ")");
  }
  q.bind_text(1, device_model);
  q.bind_text(2, name);
  rc = q.step();
  if (rc == SQLITE_DONE) return Status(StatusCode::kNotFound, "no " + what);
  if (rc != SQLITE_ROW) return error(rc, "reading " + what);
  DeviceRate r;
  r.device_model = device_model;
  r.name = name;
  r.value = sqlite3_column_double(q.get(), 0);
  r.source = q.column_text(1);
  r.measured_at_unix = q.column_int64(2);
  if (!(r.value > 0) || !std::isfinite(r.value)) {
    return Status(StatusCode::kCorruptData,
                  what + " holds value=" + std::to_string(r.value) + " (must be > 0)");
  }
  return r;
}

Status SqliteTuningDatabase::put_device_rate(const DeviceRate& rate) {
  if (!(rate.value > 0) || !std::isfinite(rate.value)) {
    return invalid_argument("device rate '" + rate.name + "': value=" + std::to_string(rate.value) +
                            " (must be > 0)");
  }
  MutexLock lock(mu_);
  return write_transaction("storing device rate '" + rate.name + "'", [&]() REQUIRES(mu_) {
    int rc = db_.exec(kCreateDeviceRatesSql);
    if (rc != SQLITE_OK) return rc;
    SqliteStatement put;
    rc = db_.prepare(
        "INSERT OR REPLACE INTO device_rates(device_model, name, value, source, "
        "measured_at) VALUES(?1, ?2, ?3, ?4, ?5)",
        &put);
    if (rc != SQLITE_OK) return rc;
    put.bind_text(1, rate.device_model);
    put.bind_text(2, rate.name);
    sqlite3_bind_double(put.get(), 3, rate.value);
    put.bind_text(4, rate.source);
    put.bind_int64(5, rate.measured_at_unix);
    rc = put.step();
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
  });
}

std::string TuningDatabase::default_path() {
  if (const char* p = std::getenv("CONVPLAN_DB"); p != nullptr && p[0] != '\0') return p;
  // The XDG base directory spec ignores a relative XDG_CACHE_HOME.
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] == '/')
    return std::string(x) + "/convplan/tuning.db";
  std::string home = home_folder();
  if (home.empty()) return "off";  // nowhere private to keep it
  return home + "/.cache/convplan/tuning.db";
}

StatusOr<DbVerifyReport> TuningDatabase::verify_file(const std::string& path) {
  if (path.empty() || detail::is_in_memory_path(path)) {
    return invalid_argument("tuning database path '" + path + "' names no file to verify");
  }
  return SqliteTuningDatabase::verify_file(path);
}

Status TuningDatabase::check_environment() { return detail::db_environment().status(); }

StatusOr<std::unique_ptr<TuningDatabase>> TuningDatabase::open(const std::string& path) {
  if (path.empty())
    return invalid_argument("tuning database path is empty (\"off\" means no file)");
  if (detail::is_in_memory_path(path)) return SqliteTuningDatabase::open_memory();
  return SqliteTuningDatabase::open_file(path);
}

}  // namespace convplan
