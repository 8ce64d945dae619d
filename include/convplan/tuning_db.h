// TuningDatabase: the persistent store of TuningRecords on SQLite, shared by every process of a
// user on one machine, so that a second process starts tuned.
//
// Thread-safe (one connection, serialized internally); many processes may open the same file at
// once (WAL mode, busy timeout, each write one transaction). It stores records, never plans.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "convplan/export.h"
#include "convplan/status.h"
#include "convplan/tuning_record.h"

namespace convplan {

struct CONVPLAN_EXPORT DbOpenReport {
  std::string path;         // the file opened, as given ("" for in-memory)
  std::string moved_aside;  // where a damaged file was moved, if one was
  std::string reason;       // why it was moved aside, why WAL was not used, or read-only
  int64_t salvaged = 0;     // intact records copied from a damaged file into the new one
  bool wal = false;
  bool read_only = false;  // it or its folder is not writable: writes fail, nothing is kept
};

struct CONVPLAN_EXPORT DbVerifyReport {
  int64_t records = 0;                // rows read
  int64_t valid = 0;                  // rows that parse and whose key matches their contents
  std::vector<std::string> problems;  // one line per bad row: its key (or rowid) and why
};

// Which records prune() removes; unset fields match everything.
struct CONVPLAN_EXPORT PruneFilter {
  std::optional<int64_t> older_than_unix;   // tuned before this time
  std::optional<std::string> device_model;  // exact DeviceInfo::model_key()
  std::optional<int64_t> cudnn_version;     // records tuned under this cuDNN version
};

// A measured property of a device model, kept so that it is measured once per device rather
// than on every start (the roofline peaks of `convplan run` and `bench`: issue 21's set-up goal).
struct CONVPLAN_EXPORT DeviceRate {
  std::string device_model;  // DeviceInfo::model_key()
  std::string name;          // e.g. "copy_gbps", "matrix_tflops:bf16:tc"
  double value = 0;
  std::string source;  // how it was measured
  int64_t measured_at_unix = 0;
  bool operator==(const DeviceRate&) const = default;
};

class CONVPLAN_EXPORT TuningDatabase {
 public:
  // The default path: $CONVPLAN_DB, else $XDG_CACHE_HOME/convplan/tuning.db, else
  // ~/.cache/convplan/tuning.db. "off" and ":memory:" mean no file.
  static std::string default_path();
  // Opens (creating with mode 0600, and its folder with 0700) the database at `path`. A file
  // that is damaged (SQLite's integrity_check fails, or SQLite cannot read its header) is moved
  // to "<path>.corrupt-<unix time>", after its intact records are copied out (report().salvaged)
  // and into the new database; one of another format or schema version, or one that SQLite can
  // only read (an unknown write version in its header), to "<path>.incompatible-<unix time>".
  // Either is reported in report() and replaced by a new database; nothing is deleted. A file
  // this user may not write is kIoError. Running short of memory (kOutOfMemory) or failing I/O
  // (kIoError) is returned as such and leaves the file where it is, even when integrity_check
  // reports the pages it could not read; SQLite's "out of memory" while memory is to spare is
  // damage (some damaged files get that answer). "<path>.lock" serializes opening between
  // processes.
  //
  // `path` is a file name, never a SQLite URI. Hostile file systems (docs/bad-inputs.md):
  // kInvalidArgument when the database, its -wal, -shm, -journal or .lock is a symbolic link or
  // not a regular file, and, unless CONVPLAN_DB_ALLOW_SHARED_FOLDER is true, when the folder
  // belongs to another user (root excepted) or others may write it, or the file belongs to
  // another user. A database whose mode lets others read or write it is used with a warning
  // (its mode is left as it is). A database this process may read but not write, or one in a
  // folder it cannot write, is opened read-only (report().read_only; writes fail with kIoError;
  // damage is kCorruptData), without making -wal or -shm files of this process's own.
  static StatusOr<std::unique_ptr<TuningDatabase>> open(const std::string& path);
  // Checks the database at `path` as it is (SQLite's integrity_check, then every row), changing
  // nothing: no damage handling, no schema, no file created. kNotFound when there is no file;
  // kCorruptData when it cannot be read as a convplan database at all; otherwise the report,
  // whose problems list what is wrong.
  static StatusOr<DbVerifyReport> verify_file(const std::string& path);
  // Reads and checks the CONVPLAN_DB_* variables (kInvalidArgument naming a malformed one), so
  // that a program can refuse bad configuration before it does anything else.
  static Status check_environment();
  virtual ~TuningDatabase() = default;

  virtual const DbOpenReport& report() const = 0;
  // kNotFound when there is no record under `key`; kCorruptData when the stored row is damaged
  // (it is skipped and counted, never returned).
  virtual StatusOr<TuningRecord> find(const std::string& key) = 0;
  // Inserts or replaces the record under record.key().
  virtual Status put(const TuningRecord& record) = 0;
  virtual Status erase(const std::string& key) = 0;  // ok also when there is no such record
  // Every intact record; bad rows are skipped and counted in *skipped when given.
  virtual StatusOr<std::vector<TuningRecord>> list(int64_t* skipped = nullptr) = 0;
  virtual StatusOr<DbVerifyReport> verify() = 0;
  virtual StatusOr<int64_t> prune(const PruneFilter& filter) = 0;  // returns rows removed
  // JSON document {"format":"convplan-tuning","version":1,"records":[...]}.
  virtual StatusOr<std::string> export_json() = 0;
  // Inserts every record of such a document in one transaction; returns how many were written.
  // With keep_existing, records already present win (merge); otherwise the imported ones do.
  // Records of the document that share a key count once: the last of them is the one imported.
  // A record that does not parse is skipped with a warning and counted in skipped_records(); a
  // document that is not such JSON, is larger than max_input_bytes() or nests deeper than
  // kMaxJsonDepth (input_limits.h) is kCorruptData (kInvalidArgument for the limits) and writes
  // nothing. The document is parsed one record at a time, not into one tree.
  virtual StatusOr<int64_t> import_json(std::string_view json, bool keep_existing) = 0;
  // Bad rows met so far by find() and list(), and bad records skipped by import_json().
  virtual int64_t skipped_records() const = 0;
  // Device rates live in a table of their own (device_rates), created by the first put; records,
  // export and import do not see them. find: kNotFound when none is stored under (model, name).
  // put inserts or replaces. The base class stores nothing (kNotSupported).
  virtual StatusOr<DeviceRate> find_device_rate(const std::string& device_model,
                                                const std::string& name);
  virtual Status put_device_rate(const DeviceRate& rate);
};

}  // namespace convplan
