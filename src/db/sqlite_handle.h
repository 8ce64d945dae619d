// Move-only RAII owners of a SQLite connection and a prepared statement, and the mapping of
// SQLite result codes to Status. Internal to the db subsystem.
//
// Neither type is thread-safe; TuningDatabase serializes every use behind its mutex.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "convplan/status.h"

namespace convplan::detail {

// SQLite's result for a call that failed "out of memory" while memory was to spare. SQLite answers
// some damaged files so (CI's fuzzer found one, of at most 20 KiB, whose integrity check failed
// "out of memory" on a machine of 24 GiB), and then the file, not the machine, is what failed.
// Its primary code is SQLITE_CORRUPT, so whatever reads the primary code takes it for damage; the
// extended number (200) is none of SQLite's SQLITE_CORRUPT_* codes.
inline constexpr int kOutOfMemoryWithMemoryToSpare = SQLITE_CORRUPT | (200 << 8);

// True when SQLite can still allocate a block (64 MiB) far larger than reading or checking a
// tuning database needs. Under a real shortage, or a heap limit set with
// sqlite3_hard_heap_limit64, it cannot. Only blame_file_for_spurious_nomem asks.
bool memory_to_spare();

// `rc`, or kOutOfMemoryWithMemoryToSpare when rc is SQLITE_NOMEM and memory_to_spare(). The
// wrappers below apply it to each failure they return, once: whatever reads that result later
// agrees on it even if memory frees up or runs out in between. A SQLITE_NOMEM that comes out of
// them is therefore a shortage.
inline int blame_file_for_spurious_nomem(int rc) {
  return (rc & 0xff) == SQLITE_NOMEM && memory_to_spare() ? kOutOfMemoryWithMemoryToSpare : rc;
}

// A Status for the SQLite result `rc`: kCorruptData for SQLITE_CORRUPT / SQLITE_NOTADB (and so
// for kOutOfMemoryWithMemoryToSpare), kOutOfMemory for SQLITE_NOMEM, kIoError for file and lock
// failures (busy included), kInternal otherwise. The message is
// "<context>: <sqlite_error_name(rc)>: <sqlite's message>".
Status sqlite_status(sqlite3* db, int rc, const std::string& context);

// sqlite3_errstr(rc), and for kOutOfMemoryWithMemoryToSpare that the file is to blame.
std::string sqlite_error_name(int rc);

// True for SQLITE_BUSY and SQLITE_LOCKED (any extended code): worth retrying.
inline bool sqlite_busy(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

class SqliteStatement {
 public:
  SqliteStatement() = default;
  explicit SqliteStatement(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~SqliteStatement() { reset_handle(nullptr); }
  SqliteStatement(SqliteStatement&& other) noexcept : stmt_(other.stmt_) { other.stmt_ = nullptr; }
  SqliteStatement& operator=(SqliteStatement&& other) noexcept {
    if (this != &other) {
      reset_handle(other.stmt_);
      other.stmt_ = nullptr;
    }
    return *this;
  }
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  sqlite3_stmt* get() const { return stmt_; }
  explicit operator bool() const { return stmt_ != nullptr; }

  // Clears the bindings and rewinds, so the statement can be run again.
  void rewind() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  // Bind parameters by 1-based index. The text is copied (SQLITE_TRANSIENT).
  int bind_text(int index, std::string_view text) {
    return sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT,
                               SQLITE_UTF8);
  }
  int bind_int64(int index, int64_t value) { return sqlite3_bind_int64(stmt_, index, value); }
  int bind_null(int index) { return sqlite3_bind_null(stmt_, index); }
  int step() { return blame_file_for_spurious_nomem(sqlite3_step(stmt_)); }

  // Column readers for the current row (0-based). A NULL text column reads as "".
  std::string column_text(int column) const;
  int64_t column_int64(int column) const { return sqlite3_column_int64(stmt_, column); }
  bool column_is_null(int column) const {
    return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
  }

 private:
  void reset_handle(sqlite3_stmt* next) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    stmt_ = next;
  }
  sqlite3_stmt* stmt_ = nullptr;
};

class SqliteConnection {
 public:
  SqliteConnection() = default;
  ~SqliteConnection() { reset_handle(nullptr); }
  SqliteConnection(SqliteConnection&& other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  SqliteConnection& operator=(SqliteConnection&& other) noexcept {
    if (this != &other) {
      reset_handle(other.db_);
      other.db_ = nullptr;
    }
    return *this;
  }
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  // Opens `path` (":memory:" for an in-memory database) with sqlite3_open_v2 `flags`. Returns the
  // SQLite result code (through blame_file_for_spurious_nomem, as exec, prepare and
  // SqliteStatement::step do); on failure *this holds nothing and *message says why.
  int open(const std::string& path, int flags, std::string* message);
  void close() { reset_handle(nullptr); }

  sqlite3* get() const { return db_; }
  explicit operator bool() const { return db_ != nullptr; }

  // Runs `sql` (one or more statements, no results wanted). Returns the SQLite result code.
  int exec(const char* sql) {
    return blame_file_for_spurious_nomem(sqlite3_exec(db_, sql, nullptr, nullptr, nullptr));
  }
  // Prepares one statement; returns the SQLite result code, *out holding it on success.
  int prepare(std::string_view sql, SqliteStatement* out);
  std::string last_message() const { return db_ ? sqlite3_errmsg(db_) : "no connection"; }

 private:
  // Statements must be finalized before this; sqlite3_close_v2 defers the close until they are,
  // so an ordering mistake leaks nothing.
  void reset_handle(sqlite3* next) {
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = next;
  }
  sqlite3* db_ = nullptr;
};

}  // namespace convplan::detail
