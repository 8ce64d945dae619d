// convplan db: the tuning database, without a GPU.
#include <sys/stat.h>

#include <cstdlib>
#include <ctime>
#include <iostream>

#include "commands.h"
#include "convplan/input_limits.h"
#include "convplan/tuning_db.h"
#include "convplan/tuning_record.h"
#include "report.h"

namespace convplan::cli {
namespace {

int status_exit(const Status& s) { return fail(kExitFailure, s.to_string()); }

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string date_text(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm);
  return buf;
}

StatusOr<std::string> read_import_file(const std::string& path) {
  CONVPLAN_ASSIGN_OR_RETURN(int64_t max_bytes, max_input_bytes());
  return read_input_file(path, "import file", max_bytes);
}

// The same file: one inode on one device, or, for a file not made yet, one name in one real
// folder.
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) {
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  }
  auto canonical = [](const std::string& p) {
    const size_t slash = p.find_last_of('/');
    const std::string folder =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
    char* real = ::realpath(folder.c_str(), nullptr);
    if (real == nullptr) return p;
    std::string out =
        std::string(real) + "/" + p.substr(slash == std::string::npos ? 0 : slash + 1);
    std::free(real);
    return out;
  };
  return canonical(a) == canonical(b);
}

// Writing an export over the database (or its -wal, -shm, -journal or lock) would destroy it.
Status check_export_target(const std::string& out, const std::string& db_path) {
  if (out.empty() || out == "-") return ok_status();
  for (const char* suffix : {"", "-wal", "-shm", "-journal", ".lock"}) {
    if (same_file(out, db_path + suffix)) {
      return invalid_argument("db export: '" + out + "' is the tuning database's own file '" +
                              db_path + suffix + "'; write the export somewhere else");
    }
  }
  return ok_status();
}

int verify_command(const std::string& path) {
  StatusOr<DbVerifyReport> r = TuningDatabase::verify_file(path);
  if (!r.ok()) return status_exit(r.status());
  std::cout << path << ": " << r->records << " rows, " << r->valid << " valid\n";
  for (const std::string& p : r->problems) std::cout << "  " << p << "\n";
  if (!r->problems.empty()) {
    return fail(kExitVerifyFailed, std::to_string(r->problems.size()) + " problem" +
                                       (r->problems.size() == 1 ? "" : "s") + " in " + path +
                                       " (nothing was changed)");
  }
  return kExitOk;
}

}  // namespace

int db_command(const GlobalOptions& global, const DbOptions& o) {
  const std::string& path = global.db_path;
  if (o.action == "path") {
    std::cout << path << "\n";
    return kExitOk;
  }
  if (path == "off" || path == ":memory:" || path.empty()) {
    return fail(kExitUsage, "the tuning database is off ('" + path +
                                "'); give --db PATH or set CONVPLAN_DB to a file");
  }
  const bool writes_new = o.action == "import" || o.action == "merge";
  // list and export of a database not made yet print what a fresh one holds: nothing (an empty
  // in-memory database stands in, so that the file is not created by a read).
  const bool reads_all = o.action == "list" || o.action == "export";
  const bool missing = !writes_new && !file_exists(path);
  if (missing && !reads_all) {
    return fail(kExitUsage, "no tuning database at '" + path + "' (nothing tuned there yet?)");
  }
  if (o.action == "prune" && !o.all && !o.older_than_days && !o.device_model && !o.cudnn_version) {
    return fail(kExitUsage,
                "prune needs a filter: --older-than DAYS, --device MODEL, --cudnn "
                "VERSION, or --all");
  }
  if (o.action == "verify") return verify_command(path);
  if (o.action == "export") {
    if (Status s = check_export_target(o.file, path); !s.ok()) return fail(kExitUsage, s.message());
  }
  std::string import_text;
  if (writes_new) {
    StatusOr<std::string> text = read_import_file(o.file);
    if (!text.ok()) return fail(kExitUsage, text.status().message());
    import_text = std::move(text).value();
  }

  StatusOr<std::unique_ptr<TuningDatabase>> opened =
      TuningDatabase::open(missing ? ":memory:" : path);
  if (!opened.ok()) return status_exit(opened.status());
  TuningDatabase& db = **opened;
  if (const DbOpenReport& r = db.report(); !r.moved_aside.empty()) {
    warn("'" + path + "' was damaged (" + r.reason + "); moved aside to " + r.moved_aside +
         " and replaced by a new database holding the " + std::to_string(r.salvaged) +
         " intact records it could read");
  }

  if (o.action == "list") {
    int64_t skipped = 0;
    StatusOr<std::vector<TuningRecord>> records = db.list(&skipped);
    if (!records.ok()) return status_exit(records.status());
    if (o.json) {
      nlohmann::json a = nlohmann::json::array();
      for (const TuningRecord& r : *records) {
        const std::string text = to_json(r);
        nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
        a.push_back(j.is_discarded() ? nlohmann::json(text) : j);
      }
      std::cout << a.dump(2) << "\n";
    } else {
      Table t({"engine", "ms", "tuned (UTC)", "key"}, {false, true, false, false});
      for (const TuningRecord& r : *records) {
        t.add_row({r.config.to_string(), fixed(r.time_ms, 4), date_text(r.tuned_at_unix), r.key()});
      }
      t.print(std::cout);
      std::cout << records->size() << " record" << (records->size() == 1 ? "" : "s") << " in "
                << path << "\n";
    }
    if (skipped > 0) {
      warn(std::to_string(skipped) + " damaged rows skipped (convplan db verify names them)");
    }
    return kExitOk;
  }
  if (o.action == "show") {
    StatusOr<TuningRecord> r = db.find(o.key);
    if (!r.ok()) return status_exit(r.status());
    const nlohmann::json j = nlohmann::json::parse(to_json(*r), nullptr, false);
    std::cout << (j.is_discarded() ? to_json(*r) : j.dump(2)) << "\n";
    return kExitOk;
  }
  if (o.action == "export") {
    StatusOr<std::string> text = db.export_json();
    if (!text.ok()) return status_exit(text.status());
    std::string out = std::move(text).value();
    if (out.empty() || out.back() != '\n') out += '\n';
    if (Status s = write_text(o.file.empty() ? "-" : o.file, out); !s.ok()) return status_exit(s);
    if (!o.file.empty()) std::cerr << "convplan: exported " << path << " to " << o.file << "\n";
    return kExitOk;
  }
  if (writes_new) {
    StatusOr<int64_t> n = db.import_json(import_text, /*keep_existing=*/o.action == "merge");
    if (!n.ok()) {
      const Status& s = n.status();
      return fail(s.code() == StatusCode::kCorruptData || s.code() == StatusCode::kInvalidArgument
                      ? kExitUsage
                      : kExitFailure,
                  o.file + ": " + s.to_string());
    }
    std::cout << (o.action == "merge" ? "merged " : "imported ") << *n << " record"
              << (*n == 1 ? "" : "s") << " from " << o.file << " into " << path << "\n";
    return kExitOk;
  }
  if (o.action == "prune") {
    PruneFilter f;
    if (o.older_than_days) {
      f.older_than_unix = static_cast<int64_t>(std::time(nullptr)) -
                          static_cast<int64_t>(*o.older_than_days * 86400);
    }
    f.device_model = o.device_model;
    f.cudnn_version = o.cudnn_version;
    StatusOr<int64_t> n = db.prune(f);
    if (!n.ok()) return status_exit(n.status());
    std::cout << "removed " << *n << " record" << (*n == 1 ? "" : "s") << " from " << path << "\n";
    return kExitOk;
  }
  return fail(kExitUsage, "unknown db action '" + o.action + "'");
}

}  // namespace convplan::cli
