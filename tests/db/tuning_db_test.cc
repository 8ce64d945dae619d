// TuningDatabase on real SQLite files: storing and finding, damage handling, schema versions,
// file modes, journal modes, export/import/merge, prune, and many processes at once.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "convplan/tuning_db.h"
#include "db/db_test_records.h"
#include "db/sqlite_heap_limit.h"

extern char** environ;

namespace convplan {
namespace {

namespace fs = std::filesystem;
using convplan::testing::make_test_record;
using convplan::testing::ScopedSqliteHeapLimit;
using Json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Plumbing

// Sets (or, with nullopt, unsets) an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

mode_t file_mode(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

// Direct SQLite access, to damage a database behind the library's back.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK) << path;
    sqlite3_busy_timeout(db_, 5000);
  }
  ~RawDb() { sqlite3_close(db_); }
  void exec(const std::string& sql) {
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << sql << ": " << (err ? err : "");
    sqlite3_free(err);
  }
  std::string text(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    std::string out;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sql;
    if (s != nullptr && sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0) != nullptr)
      out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

std::string sql_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

// The library's row checksum, recomputed here to forge rows that pass it.
std::string fnv1a64(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("fnv1a64:") + hex;
}

// Each test gets its own folder, removed afterwards.
class TuningDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/convplan-db-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/tuning.db";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::unique_ptr<TuningDatabase> open_db(const std::string& path) {
    StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path);
    EXPECT_TRUE(db.ok()) << db.status().to_string();
    return db.ok() ? std::move(db).value() : nullptr;
  }
  std::unique_ptr<TuningDatabase> open_db() { return open_db(path_); }

  void put_all(TuningDatabase& db, int first, int count, int writer = 0) {
    for (int id = first; id < first + count; ++id) {
      Status s = db.put(make_test_record(id, writer));
      ASSERT_TRUE(s.ok()) << s.to_string();
    }
  }

  // The files in the test folder whose names start with `prefix`.
  std::vector<std::string> files_starting(const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      std::string p = e.path().string();
      if (p.rfind(prefix, 0) == 0) out.push_back(p);
    }
    return out;
  }

  std::string dir_;
  std::string path_;
};

// ---------------------------------------------------------------------------------------------
// Storing and finding

TEST_F(TuningDbTest, PutThenFindReturnsTheRecordWithEveryField) {
  auto db = open_db();
  ASSERT_TRUE(db);
  const TuningRecord r = make_test_record(17, 2);
  ASSERT_TRUE(db->put(r).ok());
  StatusOr<TuningRecord> found = db->find(r.key());
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(*found, r);
  EXPECT_EQ(db->report().path, path_);
  EXPECT_TRUE(db->report().moved_aside.empty());
}

TEST_F(TuningDbTest, FindOfMissingKeyIsNotFound) {
  auto db = open_db();
  ASSERT_TRUE(db);
  put_all(*db, 0, 3);
  StatusOr<TuningRecord> found = db->find("no|such|key|1");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kNotFound);
  EXPECT_NE(found.status().message().find("no|such|key|1"), std::string::npos);
  EXPECT_EQ(db->skipped_records(), 0);
}

TEST_F(TuningDbTest, PutReplacesTheRecordUnderTheSameKey) {
  auto db = open_db();
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->put(make_test_record(5, 1)).ok());
  ASSERT_TRUE(db->put(make_test_record(5, 2)).ok());
  StatusOr<std::vector<TuningRecord>> all = db->list();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0], make_test_record(5, 2));
}

TEST_F(TuningDbTest, RecordsSurviveClosingAndReopening) {
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    put_all(*db, 0, 20);
  }
  auto db = open_db();
  ASSERT_TRUE(db);
  for (int id = 0; id < 20; ++id) {
    StatusOr<TuningRecord> found = db->find(make_test_record(id).key());
    ASSERT_TRUE(found.ok()) << found.status().to_string();
    EXPECT_EQ(*found, make_test_record(id));
  }
}

TEST_F(TuningDbTest, PutRefusesARecordWithAnEmptyKeyField) {
  auto db = open_db();
  ASSERT_TRUE(db);
  TuningRecord r = make_test_record(1);
  r.policy.clear();
  Status s = db->put(r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("policy"), std::string::npos) << s.message();
}

TEST_F(TuningDbTest, EraseRemovesOnlyThatRecordAndAMissingKeyIsFine) {
  auto db = open_db();
  ASSERT_TRUE(db);
  put_all(*db, 0, 3);
  ASSERT_TRUE(db->erase(make_test_record(1).key()).ok());
  EXPECT_EQ(db->find(make_test_record(1).key()).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(db->find(make_test_record(0).key()).ok());
  EXPECT_TRUE(db->find(make_test_record(2).key()).ok());
  EXPECT_TRUE(db->erase("never|stored|key|0").ok());
}

TEST_F(TuningDbTest, ListReturnsEveryRecordInKeyOrder) {
  auto db = open_db();
  ASSERT_TRUE(db);
  put_all(*db, 0, 12);
  int64_t skipped = -1;
  StatusOr<std::vector<TuningRecord>> all = db->list(&skipped);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(skipped, 0);
  ASSERT_EQ(all->size(), 12u);
  for (size_t i = 1; i < all->size(); ++i) EXPECT_LT((*all)[i - 1].key(), (*all)[i].key());
}

TEST_F(TuningDbTest, InMemoryDatabaseWorksAndMakesNoFile) {
  for (const char* name : {"off", ":memory:"}) {
    auto db = open_db(name);
    ASSERT_TRUE(db);
    EXPECT_EQ(db->report().path, "");
    EXPECT_FALSE(db->report().wal);
    put_all(*db, 0, 4);
    EXPECT_TRUE(db->find(make_test_record(3).key()).ok());
    EXPECT_FALSE(fs::exists(name));
  }
}

TEST_F(TuningDbTest, EmptyPathIsInvalidArgument) {
  StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open("");
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TuningDbTest, ThreadsSharingOneDatabaseSeeEachOthersRecords) {
  auto db = open_db();
  ASSERT_TRUE(db);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int id = t * 20; id < t * 20 + 30; ++id) {
        if (!db->put(make_test_record(id, t)).ok()) ++failures;
        if (!db->find(make_test_record(id, t).key()).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  StatusOr<std::vector<TuningRecord>> all = db->list();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 90u);
}

// ---------------------------------------------------------------------------------------------
// Damaged rows

TEST_F(TuningDbTest, CorruptRecordIsSkippedAndReported) {
  auto db = open_db();
  ASSERT_TRUE(db);
  put_all(*db, 0, 6);
  const std::string edited = make_test_record(1).key();
  const std::string moved = make_test_record(2).key();
  const std::string unparsable = make_test_record(3).key();
  const std::string relabelled = make_test_record(4).key();
  {
    RawDb raw(path_);
    // Contents changed behind the checksum's back.
    raw.exec(
        "UPDATE records SET record_json = replace(record_json, '350.5', '351.5') WHERE key = " +
        sql_quote(edited));
    // A row whose key is not its record's key.
    raw.exec("UPDATE records SET key = 'elsewhere|p|q|v' WHERE key = " + sql_quote(moved));
    // Broken JSON with a checksum that matches it.
    const std::string broken = "{\"device_model\": ";
    raw.exec("UPDATE records SET record_json = " + sql_quote(broken) + ", checksum = " +
             sql_quote(fnv1a64(broken)) + " WHERE key = " + sql_quote(unparsable));
    // A copied column that disagrees with the record (prune would act on it).
    raw.exec("UPDATE records SET tuned_at = 5 WHERE key = " + sql_quote(relabelled));
  }

  for (const std::string& key : {edited, unparsable, relabelled, std::string("elsewhere|p|q|v")}) {
    StatusOr<TuningRecord> found = db->find(key);
    ASSERT_FALSE(found.ok()) << key;
    EXPECT_EQ(found.status().code(), StatusCode::kCorruptData) << key;
    EXPECT_NE(found.status().message().find(key), std::string::npos) << found.status().message();
  }
  EXPECT_EQ(db->skipped_records(), 4);
  EXPECT_EQ(db->find(moved).status().code(), StatusCode::kNotFound);

  int64_t skipped = -1;
  StatusOr<std::vector<TuningRecord>> all = db->list(&skipped);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(skipped, 4);
  EXPECT_EQ(db->skipped_records(), 8);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0], make_test_record(0));
  EXPECT_EQ((*all)[1], make_test_record(5));
  // The rest keeps working.
  ASSERT_TRUE(db->put(make_test_record(9)).ok());
  EXPECT_TRUE(db->find(make_test_record(9).key()).ok());
}

TEST_F(TuningDbTest, VerifyListsEachBadRowWithItsKeyAndWhy) {
  auto db = open_db();
  ASSERT_TRUE(db);
  put_all(*db, 0, 5);
  StatusOr<DbVerifyReport> clean = db->verify();
  ASSERT_TRUE(clean.ok());
  EXPECT_EQ(clean->records, 5);
  EXPECT_EQ(clean->valid, 5);
  EXPECT_TRUE(clean->problems.empty());

  const std::string bad = make_test_record(3).key();
  RawDb(path_).exec("UPDATE records SET checksum = 'fnv1a64:0000000000000000' WHERE key = " +
                    sql_quote(bad));
  StatusOr<DbVerifyReport> report = db->verify();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->records, 5);
  EXPECT_EQ(report->valid, 4);
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_NE(report->problems[0].find(bad), std::string::npos) << report->problems[0];
  EXPECT_NE(report->problems[0].find("checksum"), std::string::npos) << report->problems[0];
  EXPECT_EQ(db->skipped_records(), 0) << "verify is not find or list";
}

// ---------------------------------------------------------------------------------------------
// Damaged and foreign files

TEST_F(TuningDbTest, GarbageFileIsMovedAsideReportedAndReplaced) {
  std::string garbage(16384, '\0');
  std::mt19937 rng(42);
  for (char& c : garbage) c = static_cast<char>(rng());
  write_file(path_, garbage);

  auto db = open_db();
  ASSERT_TRUE(db);
  const DbOpenReport& report = db->report();
  EXPECT_EQ(report.moved_aside.rfind(path_ + ".corrupt-", 0), 0u) << report.moved_aside;
  EXPECT_EQ(read_file(report.moved_aside), garbage) << "the damaged file is kept as it was";
  EXPECT_FALSE(report.reason.empty());
  put_all(*db, 0, 3);
  EXPECT_TRUE(db->find(make_test_record(2).key()).ok());
  EXPECT_EQ(file_mode(path_), 0600u);
}

TEST_F(TuningDbTest, TruncatedFileIsMovedAsideReportedAndReplaced) {
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    for (int id = 0; id < 200; ++id) {
      TuningRecord r = make_test_record(id);
      r.plan_json = std::string(3000, static_cast<char>('a' + id % 26));
      ASSERT_TRUE(db->put(r).ok());
    }
  }
  ASSERT_FALSE(fs::exists(path_ + "-wal")) << "the last close checkpoints the log";
  const auto size = fs::file_size(path_);
  ASSERT_GT(size, 400000u);
  fs::resize_file(path_, size * 2 / 5);

  auto db = open_db();
  ASSERT_TRUE(db);
  EXPECT_EQ(db->report().moved_aside.rfind(path_ + ".corrupt-", 0), 0u) << db->report().moved_aside;
  EXPECT_EQ(fs::file_size(db->report().moved_aside), size * 2 / 5);
  EXPECT_FALSE(db->report().reason.empty());
  // The records the cut left readable were copied into the new database, each one intact.
  StatusOr<std::vector<TuningRecord>> all = db->list();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(static_cast<int64_t>(all->size()), db->report().salvaged);
  EXPECT_LT(all->size(), 200u);
  for (const TuningRecord& r : *all) EXPECT_EQ(r.plan_json.size(), 3000u) << r.key();
  put_all(*db, 0, 2);
  EXPECT_TRUE(db->verify()->problems.empty());
}

TEST_F(TuningDbTest, OverwrittenPagesAreMovedAsideReportedAndReplaced) {
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    for (int id = 0; id < 100; ++id) {
      TuningRecord r = make_test_record(id);
      r.plan_json = std::string(3000, 'p');
      ASSERT_TRUE(db->put(r).ok());
    }
  }
  std::string bytes = read_file(path_);
  ASSERT_GT(bytes.size(), 30u * 4096);
  std::mt19937 rng(3);
  for (size_t i = 20 * 4096; i < 22 * 4096; ++i) bytes[i] = static_cast<char>(rng());
  write_file(path_, bytes);

  auto db = open_db();
  ASSERT_TRUE(db);
  EXPECT_EQ(db->report().moved_aside.rfind(path_ + ".corrupt-", 0), 0u) << db->report().moved_aside;
  EXPECT_EQ(read_file(db->report().moved_aside), bytes);
  const size_t salvaged = db->list()->size();
  EXPECT_EQ(static_cast<int64_t>(salvaged), db->report().salvaged);
  EXPECT_LT(salvaged, 100u) << "two pages of records were overwritten";
  put_all(*db, 1000, 2);
  EXPECT_EQ(db->list()->size(), salvaged + 2);
  EXPECT_TRUE(db->verify()->problems.empty());
}

TEST_F(TuningDbTest, FileCutInsideItsHeaderIsMovedAsideAndReplaced) {
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    put_all(*db, 0, 3);
  }
  fs::resize_file(path_, 60);
  auto db = open_db();
  ASSERT_TRUE(db);
  EXPECT_FALSE(db->report().moved_aside.empty());
  put_all(*db, 0, 1);
}

TEST_F(TuningDbTest, NewerSchemaVersionIsMovedAsideAndReplaced) {
  {
    RawDb raw(path_);
    raw.exec(
        "CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT);"
        "INSERT INTO meta VALUES('format', 'convplan-tuning'), ('schema_version', '2');"
        "CREATE TABLE records2(k TEXT);");
  }
  auto db = open_db();
  ASSERT_TRUE(db);
  const DbOpenReport& report = db->report();
  EXPECT_EQ(report.moved_aside.rfind(path_ + ".incompatible-", 0), 0u) << report.moved_aside;
  EXPECT_NE(report.reason.find("schema version '2'"), std::string::npos) << report.reason;
  EXPECT_EQ(RawDb(report.moved_aside).text("SELECT value FROM meta WHERE name = 'schema_version'"),
            "2");
  put_all(*db, 0, 2);
  EXPECT_EQ(RawDb(path_).text("SELECT value FROM meta WHERE name = 'schema_version'"), "1");
}

TEST_F(TuningDbTest, DatabaseOfAnotherFormatIsMovedAsideAndReplaced) {
  RawDb(path_).exec(
      "CREATE TABLE photos(id INTEGER, name TEXT); INSERT INTO photos VALUES(1, 'cat');");
  auto db = open_db();
  ASSERT_TRUE(db);
  EXPECT_FALSE(db->report().moved_aside.empty());
  EXPECT_NE(db->report().reason.find("not a convplan tuning database"), std::string::npos)
      << db->report().reason;
  EXPECT_EQ(RawDb(db->report().moved_aside).text("SELECT name FROM photos"), "cat");
  put_all(*db, 0, 2);
}

TEST_F(TuningDbTest, EmptyExistingFileBecomesADatabase) {
  write_file(path_, "");
  auto db = open_db();
  ASSERT_TRUE(db);
  EXPECT_TRUE(db->report().moved_aside.empty());
  put_all(*db, 0, 2);
}

// A good database is never taken for a damaged one because memory ran short, wherever in open()
// it runs short (the regression guard of blame_file_for_spurious_nomem): open() fails with
// kOutOfMemory and leaves the file as it was, or it opens the file with its records.
TEST_F(TuningDbTest, OpenShortOfMemoryFailsAndLeavesAGoodFileAsItWas) {
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    put_all(*db, 0, 20);
  }
  const std::string bytes = read_file(path_);
  int failures = 0;
  int failed_checks = 0;
  bool opened = false;
  for (sqlite3_int64 spare = 4096; !opened && spare < (sqlite3_int64{64} << 20);
       spare += spare / 64) {
    StatusOr<std::unique_ptr<TuningDatabase>> db = [&] {
      ScopedSqliteHeapLimit shortage(spare);
      return TuningDatabase::open(path_);
    }();
    if (db.ok()) {
      opened = true;
      EXPECT_TRUE((*db)->report().moved_aside.empty()) << (*db)->report().reason;
      EXPECT_TRUE((*db)->find(make_test_record(19).key()).ok()) << "with " << spare << " spare";
      continue;
    }
    ++failures;
    if (db.status().message().find("integrity_check") != std::string::npos) ++failed_checks;
    EXPECT_EQ(db.status().code(), StatusCode::kOutOfMemory) << db.status().to_string();
    EXPECT_TRUE(read_file(path_) == bytes) << "changed, with " << spare << " bytes spare";
    EXPECT_TRUE(files_starting(path_ + ".corrupt").empty()) << "with " << spare << " spare";
    EXPECT_TRUE(files_starting(path_ + ".incompatible").empty()) << "with " << spare << " spare";
  }
  EXPECT_TRUE(opened);
  EXPECT_GT(failures, 0);
  EXPECT_GT(failed_checks, 0) << "no limit fell inside the integrity check";
}

// Verifying short of memory says so; it does not report the pages it could not read as damage.
TEST_F(TuningDbTest, VerifyShortOfMemoryFailsInsteadOfReportingDamage) {
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    put_all(*db, 0, 20);
  }
  int failures = 0;
  for (sqlite3_int64 spare = 1024; spare < (sqlite3_int64{64} << 20); spare += spare / 64) {
    StatusOr<DbVerifyReport> report = [&] {
      ScopedSqliteHeapLimit shortage(spare);
      return TuningDatabase::verify_file(path_);
    }();
    if (report.ok()) {
      EXPECT_TRUE(report->problems.empty()) << spare << " spare: " << report->problems.front();
      EXPECT_EQ(report->valid, 20);
      break;
    }
    ++failures;
    EXPECT_EQ(report.status().code(), StatusCode::kOutOfMemory) << report.status().to_string();
  }
  EXPECT_GT(failures, 0);
}

// ---------------------------------------------------------------------------------------------
// Files, folders, paths and journal modes

TEST_F(TuningDbTest, NewFileIsPrivateAndNewFoldersAreTooWhateverTheUmask) {
  const std::string nested = dir_ + "/a/b/tuning.db";
  mode_t old = ::umask(0);  // the most permissive umask: only our own chmod keeps things private
  auto db = open_db(nested);
  ::umask(old);
  ASSERT_TRUE(db);
  put_all(*db, 0, 2);
  EXPECT_EQ(file_mode(nested), 0600u);
  EXPECT_EQ(file_mode(dir_ + "/a"), 0700u);
  EXPECT_EQ(file_mode(dir_ + "/a/b"), 0700u);
  ASSERT_TRUE(fs::exists(nested + "-wal"));
  EXPECT_EQ(file_mode(nested + "-wal"), 0600u);
  EXPECT_EQ(file_mode(nested + "-shm"), 0600u);
  EXPECT_EQ(file_mode(nested + ".lock"), 0600u);
}

TEST_F(TuningDbTest, LocalFileUsesWal) {
  ScopedEnv local("CONVPLAN_DB_ASSUME_NETWORK_FS", "0");
  auto db = open_db();
  ASSERT_TRUE(db);
  EXPECT_TRUE(db->report().wal);
  EXPECT_EQ(RawDb(path_).text("PRAGMA journal_mode"), "wal");
}

TEST_F(TuningDbTest, NetworkFileSystemUsesARollbackJournal) {
  ScopedEnv network("CONVPLAN_DB_ASSUME_NETWORK_FS", "1");
  auto db = open_db();
  ASSERT_TRUE(db);
  EXPECT_FALSE(db->report().wal);
  EXPECT_NE(db->report().reason.find("network file system"), std::string::npos)
      << db->report().reason;
  put_all(*db, 0, 5);
  EXPECT_FALSE(fs::exists(path_ + "-wal"));
  EXPECT_EQ(RawDb(path_).text("PRAGMA journal_mode"), "delete");
  EXPECT_TRUE(db->find(make_test_record(4).key()).ok());
}

TEST_F(TuningDbTest, DefaultPathFollowsTheEnvironment) {
  ScopedEnv xdg("XDG_CACHE_HOME", "/xdg/cache");
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv db("CONVPLAN_DB", "/data/my.db");
    EXPECT_EQ(TuningDatabase::default_path(), "/data/my.db");
  }
  {
    ScopedEnv db("CONVPLAN_DB", "off");
    EXPECT_EQ(TuningDatabase::default_path(), "off");
  }
  ScopedEnv no_db("CONVPLAN_DB", std::nullopt);
  EXPECT_EQ(TuningDatabase::default_path(), "/xdg/cache/convplan/tuning.db");
  ScopedEnv no_xdg("XDG_CACHE_HOME", std::nullopt);
  EXPECT_EQ(TuningDatabase::default_path(), "/home/someone/.cache/convplan/tuning.db");
}

// ---------------------------------------------------------------------------------------------
// Prune, export, import, merge

TEST_F(TuningDbTest, PruneRemovesOnlyMatchingRecordsAndCountsThem) {
  auto db = open_db();
  ASSERT_TRUE(db);
  put_all(*db, 0, 10);  // tuned_at = 1700000000 + id, all on kTestDeviceModel (cuDNN 91900)
  TuningRecord other = make_test_record(50);
  other.device_model = "NVIDIA A100|sm80|sms108|cudnn90100";
  ASSERT_TRUE(db->put(other).ok());

  PruneFilter by_cudnn;
  by_cudnn.cudnn_version = 90100;
  EXPECT_EQ(*db->prune(by_cudnn), 1);
  EXPECT_EQ(db->find(other.key()).status().code(), StatusCode::kNotFound);

  PruneFilter old_on_model;
  old_on_model.older_than_unix = 1700000004;
  old_on_model.device_model = convplan::testing::kTestDeviceModel;
  EXPECT_EQ(*db->prune(old_on_model), 4);

  PruneFilter other_model;
  other_model.device_model = "NVIDIA H100|sm90|sms132|cudnn91900";
  EXPECT_EQ(*db->prune(other_model), 0);

  StatusOr<std::vector<TuningRecord>> left = db->list();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 6u);
  for (const TuningRecord& r : *left) EXPECT_GE(r.tuned_at_unix, 1700000004);
  EXPECT_EQ(*db->prune(PruneFilter{}), 6) << "an empty filter matches everything";
}

TEST_F(TuningDbTest, ExportThenImportIntoAnotherDatabaseGivesTheSameRecords) {
  auto a = open_db();
  ASSERT_TRUE(a);
  put_all(*a, 0, 8, 1);
  StatusOr<std::string> doc = a->export_json();
  ASSERT_TRUE(doc.ok());
  Json j = Json::parse(*doc);
  EXPECT_EQ(j["format"], "convplan-tuning");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["records"].size(), 8u);

  auto b = open_db(dir_ + "/other.db");
  ASSERT_TRUE(b);
  StatusOr<int64_t> imported = b->import_json(*doc, /*keep_existing=*/false);
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  EXPECT_EQ(*imported, 8);
  EXPECT_EQ(*b->list(), *a->list());
  EXPECT_EQ(*b->export_json(), *doc);

  auto empty = open_db(":memory:");
  ASSERT_TRUE(empty);
  EXPECT_EQ(Json::parse(*empty->export_json())["records"].size(), 0u);
}

TEST_F(TuningDbTest, ImportReplacesExistingRecordsUnlessKeepExistingMerges) {
  auto source = open_db(":memory:");
  ASSERT_TRUE(source);
  put_all(*source, 0, 4, /*writer=*/2);
  const std::string doc = *source->export_json();

  auto replace = open_db();
  ASSERT_TRUE(replace);
  put_all(*replace, 2, 4, /*writer=*/1);  // ids 2..5; 2 and 3 are in the document too
  EXPECT_EQ(*replace->import_json(doc, /*keep_existing=*/false), 4);
  EXPECT_EQ(*replace->find(make_test_record(2).key()), make_test_record(2, 2));
  EXPECT_EQ(*replace->find(make_test_record(5).key()), make_test_record(5, 1));

  auto merge = open_db(dir_ + "/merge.db");
  ASSERT_TRUE(merge);
  put_all(*merge, 2, 4, /*writer=*/1);
  EXPECT_EQ(*merge->import_json(doc, /*keep_existing=*/true), 2) << "only ids 0 and 1 are new";
  EXPECT_EQ(*merge->find(make_test_record(0).key()), make_test_record(0, 2));
  EXPECT_EQ(*merge->find(make_test_record(2).key()), make_test_record(2, 1));
  EXPECT_EQ(merge->list()->size(), 6u);
}

TEST_F(TuningDbTest, MergeReplacesAnExistingRecordThatIsDamaged) {
  auto db = open_db();
  ASSERT_TRUE(db);
  put_all(*db, 0, 2, 1);
  RawDb(path_).exec("UPDATE records SET checksum = 'x' WHERE key = " +
                    sql_quote(make_test_record(1).key()));
  auto source = open_db(":memory:");
  put_all(*source, 0, 2, 2);
  EXPECT_EQ(*db->import_json(*source->export_json(), /*keep_existing=*/true), 1);
  EXPECT_EQ(*db->find(make_test_record(0).key()), make_test_record(0, 1));
  EXPECT_EQ(*db->find(make_test_record(1).key()), make_test_record(1, 2));
}

TEST_F(TuningDbTest, ImportSkipsBadRecordsAndCountsThem) {
  Json doc = {{"format", "convplan-tuning"}, {"version", 1}, {"records", Json::array()}};
  for (int id = 0; id < 3; ++id)
    doc["records"].push_back(Json::parse(to_json(make_test_record(id))));
  doc["records"][1].erase("problem");
  doc["records"].push_back("not a record");
  auto db = open_db();
  ASSERT_TRUE(db);
  StatusOr<int64_t> imported = db->import_json(doc.dump(), false);
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  EXPECT_EQ(*imported, 2);
  EXPECT_EQ(db->skipped_records(), 2);
  EXPECT_TRUE(db->find(make_test_record(0).key()).ok());
  EXPECT_TRUE(db->find(make_test_record(2).key()).ok());
  EXPECT_EQ(db->list()->size(), 2u);
}

TEST_F(TuningDbTest, ImportOfAnotherDocumentIsRefusedAndWritesNothing) {
  auto db = open_db();
  ASSERT_TRUE(db);
  const std::string record = to_json(make_test_record(0));
  struct Case {
    std::string doc;
    StatusCode code;
  };
  const Case cases[] = {
      {"{\"format\":\"other\",\"version\":1,\"records\":[" + record + "]}",
       StatusCode::kInvalidArgument},
      {"{\"format\":\"convplan-tuning\",\"version\":2,\"records\":[" + record + "]}",
       StatusCode::kNotSupported},
      {"{\"format\":\"convplan-tuning\",\"version\":1,\"records\":{}}",
       StatusCode::kInvalidArgument},
      {"[" + record + "]", StatusCode::kInvalidArgument},
      {"{\"format\":\"convplan-tuning\",\"version\":1,\"records\":[" + record,
       StatusCode::kCorruptData},
  };
  for (const Case& c : cases) {
    StatusOr<int64_t> imported = db->import_json(c.doc, false);
    ASSERT_FALSE(imported.ok()) << c.doc;
    EXPECT_EQ(imported.status().code(), c.code) << imported.status().to_string();
  }
  EXPECT_TRUE(db->list()->empty());
}

// ---------------------------------------------------------------------------------------------
// Many processes

// Starts db_writer with `args`; returns its pid.
pid_t spawn_writer(const std::vector<std::string>& args) {
  std::vector<std::string> all = {CONVPLAN_DB_WRITER};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, CONVPLAN_DB_WRITER, nullptr, nullptr, argv.data(), environ);
  EXPECT_EQ(rc, 0) << "posix_spawn " << CONVPLAN_DB_WRITER;
  return rc == 0 ? pid : -1;
}

// The complete lines of `path`: a writer killed inside write() may leave a last, partial one.
std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  const std::string text = read_file(path);
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(text.substr(start, nl - start));
  return lines;
}

// True when `found` is the record some writer in `writers` puts under id.
bool is_from_one_of(const TuningRecord& found, int id, const std::vector<int>& writers) {
  for (int w : writers) {
    if (found == make_test_record(id, w)) return true;
  }
  return false;
}

TEST_F(TuningDbTest, EightProcessesWritingOverlappingRecordsLoseNothing) {
  constexpr int kWriters = 8, kStride = 20, kCount = 40;  // writer w: ids [20w, 20w + 40)
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    pids.push_back(spawn_writer({path_, dir_ + "/log" + std::to_string(w), std::to_string(w),
                                 std::to_string(w * kStride), std::to_string(kCount)}));
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  }
  auto db = open_db();
  ASSERT_TRUE(db);
  EXPECT_TRUE(db->report().moved_aside.empty());
  StatusOr<DbVerifyReport> report = db->verify();
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty()) << report->problems[0];
  const int ids = (kWriters - 1) * kStride + kCount;
  EXPECT_EQ(report->records, ids);
  for (int id = 0; id < ids; ++id) {
    std::vector<int> writers;
    for (int w = 0; w < kWriters; ++w) {
      if (id >= w * kStride && id < w * kStride + kCount) writers.push_back(w);
    }
    StatusOr<TuningRecord> found = db->find(make_test_record(id).key());
    ASSERT_TRUE(found.ok()) << id << ": " << found.status().to_string();
    EXPECT_TRUE(is_from_one_of(*found, id, writers)) << id;
  }
}

TEST_F(TuningDbTest, WritersKilledMidWriteLoseNoCommittedRecord) {
  constexpr int kRounds = 4, kWriters = 4, kCount = 60;
  std::mt19937 rng(7);
  std::vector<std::string> logs;
  int killed = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<pid_t> pids;
    for (int w = 0; w < kWriters; ++w) {
      const int writer = round * kWriters + w;
      logs.push_back(dir_ + "/log" + std::to_string(writer));
      // Overlapping ranges: writer w of every round covers ids [15w, 15w + 60).
      pids.push_back(spawn_writer({path_, logs.back(), std::to_string(writer),
                                   std::to_string(w * 15), std::to_string(kCount), "200"}));
    }
    for (pid_t pid : pids) {
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::uniform_int_distribution<int>(5, 120)(rng)));
      ::kill(pid, SIGKILL);
    }
    for (pid_t pid : pids) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      if (WIFSIGNALED(status)) {
        ++killed;
      } else {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "writer failed: status " << status;
      }
    }
  }
  EXPECT_GT(killed, 0) << "no writer was killed: the test checked nothing";

  auto db = open_db();
  ASSERT_TRUE(db);
  EXPECT_TRUE(db->report().moved_aside.empty()) << db->report().reason;
  StatusOr<DbVerifyReport> report = db->verify();
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty()) << report->problems[0];
  EXPECT_EQ(report->records, report->valid);

  std::map<std::string, int> id_of_key;
  for (int id = 0; id < (kWriters - 1) * 15 + kCount; ++id)
    id_of_key[make_test_record(id).key()] = id;
  std::vector<int> all_writers;
  for (int w = 0; w < kRounds * kWriters; ++w) all_writers.push_back(w);
  size_t committed = 0;
  for (const std::string& log : logs) {
    for (const std::string& key : read_lines(log)) {
      ++committed;
      ASSERT_EQ(id_of_key.count(key), 1u) << "log line is not a key: " << key;
      StatusOr<TuningRecord> found = db->find(key);
      ASSERT_TRUE(found.ok()) << key << ": " << found.status().to_string();
      EXPECT_TRUE(is_from_one_of(*found, id_of_key[key], all_writers)) << key;
    }
  }
  EXPECT_GT(committed, 0u) << "no put() returned before the kills: the test checked nothing";
}

// Starts db_stress_worker with `args`; returns its pid.
pid_t spawn_stress_worker(const std::vector<std::string>& args) {
  std::vector<std::string> all = {CONVPLAN_DB_STRESS_WORKER};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, CONVPLAN_DB_STRESS_WORKER, nullptr, nullptr, argv.data(), environ);
  EXPECT_EQ(rc, 0) << "posix_spawn " << CONVPLAN_DB_STRESS_WORKER;
  return rc == 0 ? pid : -1;
}

TEST_F(TuningDbTest, StressWorkersKilledAndRestartedLoseNoCommittedRecord) {
  // Issue 18: 8 workers import, tune (scripted backend), prune and verify one database while
  // this process kills one of them every few milliseconds and starts it again. Afterwards
  // every record whose write had returned is there, and the file verifies clean.
  const std::vector<std::string> roles = {"import", "import", "import", "tune",
                                          "tune",   "prune",  "verify", "verify"};
  constexpr int kSeconds = 15;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(kSeconds);
  auto start = [&](size_t w) {
    const auto left =
        std::chrono::duration_cast<std::chrono::seconds>(end - std::chrono::steady_clock::now());
    return spawn_stress_worker({roles[w], path_, dir_ + "/log" + std::to_string(w),
                                std::to_string(w),
                                std::to_string(std::max<int64_t>(1, left.count()))});
  };
  std::vector<pid_t> pids;
  for (size_t w = 0; w < roles.size(); ++w) pids.push_back(start(w));
  std::mt19937 rng(18);
  int kills = 0;
  while (std::chrono::steady_clock::now() + std::chrono::seconds(1) < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 180));
    const size_t w = rng() % roles.size();
    ::kill(pids[w], SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pids[w], &status, 0), pids[w]);
    // A worker that exited by itself before the kill must have done so cleanly.
    if (WIFEXITED(status)) {
      EXPECT_EQ(WEXITSTATUS(status), 0) << roles[w] << " worker " << w << " failed";
    } else {
      ++kills;
    }
    pids[w] = start(w);
  }
  for (size_t w = 0; w < roles.size(); ++w) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids[w], &status, 0), pids[w]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << roles[w] << " worker " << w << ": status " << status;
  }
  EXPECT_GT(kills, 20);

  StatusOr<DbVerifyReport> report = TuningDatabase::verify_file(path_);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_TRUE(report->problems.empty()) << report->problems.front();
  auto db = open_db();
  ASSERT_TRUE(db);
  EXPECT_TRUE(db->report().moved_aside.empty()) << db->report().reason;
  std::set<std::string> committed;
  for (size_t w = 0; w < roles.size(); ++w) {
    for (const std::string& key : read_lines(dir_ + "/log" + std::to_string(w)))
      committed.insert(key);
  }
  size_t tuned = 0;
  for (const std::string& key : committed) {
    EXPECT_TRUE(db->find(key).ok()) << "committed, then lost: " << key;
    if (key.find(convplan::testing::kTestDeviceModel) == std::string::npos) ++tuned;
  }
  EXPECT_GT(committed.size(), 50u) << "too little was written for the test to mean anything";
  EXPECT_GT(tuned, 0u) << "no tuned record was committed";
  std::printf("stress: %d kills, %zu committed records (%zu tuned), all found\n", kills,
              committed.size(), tuned);
}

// ---------------------------------------------------------------------------------------------
// Hostile files, folders and documents (issue 18, docs/bad-inputs.md)

// Zeroes the root page of the records table's primary-key index: the rows stay readable through
// the table itself, the index is damaged.
void damage_the_key_index(const std::string& path) {
  int64_t page = 0, page_size = 0;
  {
    RawDb raw(path);
    page = std::stoll(
        raw.text("SELECT rootpage FROM sqlite_schema WHERE name = 'sqlite_autoindex_records_1'"));
    page_size = std::stoll(raw.text("PRAGMA page_size"));
  }
  std::string bytes = read_file(path);
  ASSERT_GE(static_cast<int64_t>(bytes.size()), page * page_size);
  std::fill(bytes.begin() + (page - 1) * page_size, bytes.begin() + page * page_size, '\0');
  write_file(path, bytes);
}

TEST_F(TuningDbTest, DamageToTheIndexOnlySalvagesEveryRecord) {
  // Case 8: index damage used to discard every record.
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    put_all(*db, 0, 40);
  }
  damage_the_key_index(path_);
  ::testing::internal::CaptureStderr();
  auto db = open_db();
  const std::string warning = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(db);
  EXPECT_EQ(db->report().moved_aside.rfind(path_ + ".corrupt-", 0), 0u) << db->report().moved_aside;
  EXPECT_EQ(db->report().salvaged, 40);
  EXPECT_NE(warning.find("40 of the 40 records it could read were intact"), std::string::npos)
      << warning;
  for (int id = 0; id < 40; ++id) {
    StatusOr<TuningRecord> r = db->find(make_test_record(id).key());
    ASSERT_TRUE(r.ok()) << id << ": " << r.status().to_string();
    EXPECT_EQ(to_json(*r), to_json(make_test_record(id)));
  }
  EXPECT_TRUE(db->verify()->problems.empty());
}

TEST_F(TuningDbTest, VerifyFileReportsDamageAndChangesNothing) {
  // Case 9: verify used to move the file aside first, then verify the new empty one.
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    put_all(*db, 0, 10);
  }
  damage_the_key_index(path_);
  const std::string before = read_file(path_);
  StatusOr<DbVerifyReport> report = TuningDatabase::verify_file(path_);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_FALSE(report->problems.empty());
  EXPECT_EQ(read_file(path_), before);
  EXPECT_TRUE(files_starting(path_ + ".corrupt").empty());
  EXPECT_FALSE(fs::exists(path_ + "-wal"));
  EXPECT_FALSE(fs::exists(path_ + "-shm"));

  write_file(path_, std::string(8192, 'x'));
  report = TuningDatabase::verify_file(path_);
  EXPECT_EQ(report.status().code(), StatusCode::kCorruptData) << report.status().to_string();
  EXPECT_EQ(read_file(path_), std::string(8192, 'x'));
  EXPECT_EQ(TuningDatabase::verify_file(dir_ + "/none.db").status().code(), StatusCode::kNotFound);
}

TEST_F(TuningDbTest, VerifyOfAHealthyFileLeavesNoLogFilesBehind) {
  // Case 11: a reader's -wal and -shm files stayed behind.
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    put_all(*db, 0, 3);
  }
  ASSERT_FALSE(fs::exists(path_ + "-wal"));
  StatusOr<DbVerifyReport> report = TuningDatabase::verify_file(path_);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->valid, 3);
  EXPECT_TRUE(report->problems.empty());
  EXPECT_FALSE(fs::exists(path_ + "-wal"));
  EXPECT_FALSE(fs::exists(path_ + "-shm"));
}

TEST_F(TuningDbTest, SymbolicLinksAreNeverFollowed) {
  // Case 4: a link planted under the database's name (or its lock's, or its log's) made the
  // victim's file be overwritten.
  const std::string victim = dir_ + "/victim";
  write_file(victim, "precious");
  for (const std::string suffix : {"", ".lock", "-wal", "-shm", "-journal"}) {
    std::error_code ec;
    for (const char* s : {"", ".lock", "-wal", "-shm", "-journal"}) fs::remove(path_ + s, ec);
    if (!suffix.empty()) write_file(path_, "");
    ASSERT_EQ(::symlink(victim.c_str(), (path_ + suffix).c_str()), 0);
    StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path_);
    EXPECT_EQ(db.status().code(), StatusCode::kInvalidArgument) << suffix;
    EXPECT_NE(db.status().message().find("is a symbolic link"), std::string::npos)
        << db.status().to_string();
    EXPECT_EQ(read_file(victim), "precious") << suffix;
  }
}

TEST_F(TuningDbTest, ALogRedirectedToADeviceIsRefused) {
  // Case 5: a journal redirected to /dev/null was accepted.
  {
    auto db = open_db();
    ASSERT_TRUE(db);
  }
  ASSERT_EQ(::mkfifo((path_ + "-journal").c_str(), 0600), 0);
  StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path_);
  EXPECT_EQ(db.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(db.status().message().find("not a regular file"), std::string::npos)
      << db.status().to_string();
}

TEST_F(TuningDbTest, AFolderOthersMayWriteIsRefusedUnlessAllowedExplicitly) {
  // Case 4: refuse a folder another user owns or others can write, unless told otherwise.
  ASSERT_EQ(::chmod(dir_.c_str(), 01777), 0);
  StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path_);
  EXPECT_EQ(db.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(db.status().message().find("CONVPLAN_DB_ALLOW_SHARED_FOLDER=1"), std::string::npos)
      << db.status().to_string();
  EXPECT_FALSE(fs::exists(path_)) << "nothing is made in a refused folder";
  {
    ScopedEnv allow("CONVPLAN_DB_ALLOW_SHARED_FOLDER", "yes");
    auto allowed = open_db();
    ASSERT_TRUE(allowed);
    put_all(*allowed, 0, 1);
  }
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  if (::geteuid() == 0) {  // only root can give the folder to another user
    ASSERT_EQ(::chown(dir_.c_str(), 65534, 65534), 0);
    db = TuningDatabase::open(path_);
    EXPECT_EQ(db.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(db.status().message().find("belongs to another user"), std::string::npos)
        << db.status().to_string();
    ASSERT_EQ(::chown(dir_.c_str(), 0, 0), 0);
  }
  ScopedEnv bad("CONVPLAN_DB_ALLOW_SHARED_FOLDER", "perhaps");
  db = TuningDatabase::open(path_);
  EXPECT_EQ(db.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(db.status().message().find("CONVPLAN_DB_ALLOW_SHARED_FOLDER='perhaps'"),
            std::string::npos);
}

TEST_F(TuningDbTest, ALooseModeIsWarnedAboutAndNeverWidened) {
  // Case 5: a pre-existing 0666 database was used silently.
  {
    auto db = open_db();
    ASSERT_TRUE(db);
  }
  ASSERT_EQ(::chmod(path_.c_str(), 0640), 0);
  ::testing::internal::CaptureStderr();
  auto db = open_db();
  const std::string warning = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(db);
  put_all(*db, 0, 1);
  EXPECT_NE(warning.find("has mode 0640"), std::string::npos) << warning;
  EXPECT_EQ(file_mode(path_), 0640u);
  EXPECT_EQ(file_mode(path_ + ".lock"), 0600u);
}

TEST_F(TuningDbTest, AFileColonPathIsAFileNotASqliteUri) {
  // Case 6: "file:x?mode=memory" opened an in-memory database; records "imported" there were lost.
  const fs::path old = fs::current_path();
  fs::current_path(dir_);
  {
    auto db = open_db("file:x.db?mode=memory");
    ASSERT_TRUE(db);
    put_all(*db, 0, 2);
  }
  auto db = open_db("file:x.db?mode=memory");
  fs::current_path(old);
  ASSERT_TRUE(db);
  EXPECT_TRUE(fs::exists(dir_ + "/file:x.db?mode=memory"));
  EXPECT_EQ(db->list()->size(), 2u);
}

// Runs `body` in a child process without root's right to write anywhere (as nobody, after the
// folder and `files` were given to nobody) or, when not root, in this process. Returns what
// `body` returned.
int run_unprivileged(const std::string& folder, const std::vector<std::string>& files,
                     const std::function<int()>& body) {
  if (::geteuid() != 0) return body();
  for (const std::string& p : files) {
    if (::chown(p.c_str(), 65534, 65534) != 0) return 20;
  }
  if (::chown(folder.c_str(), 65534, 65534) != 0) return 21;
  const pid_t pid = ::fork();
  if (pid < 0) return 22;
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(23);
    ::_exit(body());
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 24;
  return WEXITSTATUS(status);
}

// Opens path read-only as it is: 0 when it lists `records` records and refuses a write.
int opens_read_only(const std::string& path, size_t records) {
  StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path);
  if (!db.ok()) {
    std::fprintf(stderr, "open: %s\n", db.status().to_string().c_str());
    return 11;
  }
  if (!(*db)->report().read_only || !(*db)->report().moved_aside.empty()) return 12;
  StatusOr<std::vector<TuningRecord>> all = (*db)->list();
  if (!all.ok() || all->size() != records) return 13;
  if ((*db)->put(make_test_record(7)).code() != StatusCode::kIoError) return 14;
  return 0;
}

TEST_F(TuningDbTest, AHealthyDatabaseInAReadOnlyFolderIsReadNotReplaced) {
  // Case 10: a read-only folder made a healthy database look damaged.
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    put_all(*db, 0, 3);
  }
  ASSERT_EQ(::chmod(dir_.c_str(), 0500), 0);
  EXPECT_EQ(
      run_unprivileged(dir_, {path_, path_ + ".lock"}, [&] { return opens_read_only(path_, 3); }),
      0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  EXPECT_TRUE(files_starting(path_ + ".corrupt").empty());
  EXPECT_FALSE(fs::exists(path_ + "-wal"));
}

TEST_F(TuningDbTest, ADatabaseThisUserMayNotWriteIsReadAndGetsNoLogFilesOfItsOwn) {
  // Case 11: a reader that could not write the file still made -wal and -shm files (its own),
  // which then broke the owner's use.
  {
    auto db = open_db();
    ASSERT_TRUE(db);
    put_all(*db, 0, 4);
  }
  ASSERT_EQ(::chmod(path_.c_str(), 0400), 0);
  EXPECT_EQ(
      run_unprivileged(dir_, {path_, path_ + ".lock"}, [&] { return opens_read_only(path_, 4); }),
      0);
  EXPECT_FALSE(fs::exists(path_ + "-wal"));
  EXPECT_FALSE(fs::exists(path_ + "-shm"));
}

TEST_F(TuningDbTest, ImportOfADeeplyNestedDocumentIsRefusedWithoutACrash) {
  // Case 1: 100000 levels crashed the JSON printer (stack overflow).
  auto db = open_db();
  ASSERT_TRUE(db);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  StatusOr<int64_t> n = db->import_json(
      "{\"format\":\"convplan-tuning\",\"version\":1,\"records\":[" + deep + "]}", false);
  EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(n.status().message().find("nested deeper than 32 levels"), std::string::npos)
      << n.status().to_string();
  EXPECT_EQ(tuning_record_from_json(std::string(100000, '{')).status().code(),
            StatusCode::kCorruptData);
}

TEST_F(TuningDbTest, ImportLargerThanTheLimitIsRefused) {
  auto db = open_db();
  ASSERT_TRUE(db);
  put_all(*db, 0, 4);
  const std::string doc = *db->export_json();
  ScopedEnv limit("CONVPLAN_MAX_INPUT_BYTES", "2K");
  ASSERT_GT(doc.size(), 2048u);
  StatusOr<int64_t> n = db->import_json(doc, false);
  EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(n.status().message().find("more than the limit of 2048"), std::string::npos)
      << n.status().to_string();
}

TEST_F(TuningDbTest, ImportWithDuplicateKeysCountsEachKeyOnceAndTheLastWins) {
  // Case 14: records sharing a key were each counted as imported.
  auto db = open_db();
  ASSERT_TRUE(db);
  std::string records;
  for (int writer : {1, 2, 3})
    records += (records.empty() ? "" : ",") + to_json(make_test_record(5, writer));
  records += "," + to_json(make_test_record(6));
  StatusOr<int64_t> n = db->import_json(
      "{\"format\":\"convplan-tuning\",\"version\":1,\"records\":[" + records + "]}", false);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(db->list()->size(), 2u);
  EXPECT_EQ(to_json(*db->find(make_test_record(5).key())), to_json(make_test_record(5, 3)));
}

TEST_F(TuningDbTest, ImportReadsTheRecordsOfALargeDocumentOneAtATime) {
  // The import no longer builds one tree of the whole document: what it imports is still
  // every record, in order, with the header checked after the records.
  auto db = open_db();
  ASSERT_TRUE(db);
  put_all(*db, 0, 300);
  const std::string doc = *db->export_json();
  auto other = open_db(dir_ + "/other.db");
  ASSERT_TRUE(other);
  StatusOr<int64_t> n = other->import_json(doc, false);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(*n, 300);
  EXPECT_EQ(*other->export_json(), doc);
  std::string v2 = doc;
  v2.replace(v2.find("\"version\":1"), 11, "\"version\":2");
  EXPECT_EQ(other->import_json(v2, false).status().code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace convplan
