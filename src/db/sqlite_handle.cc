#include "db/sqlite_handle.h"

namespace convplan::detail {

Status sqlite_status(sqlite3* db, int rc, const std::string& context) {
  std::string message = context + ": " + sqlite_error_name(rc);
  if (db != nullptr && sqlite3_errcode(db) != SQLITE_OK) {
    const char* detail = sqlite3_errmsg(db);
    if (detail != nullptr && message.find(detail) == std::string::npos)
      message += std::string(": ") + detail;
  }
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return corrupt_data(std::move(message));
    case SQLITE_NOMEM: return out_of_memory(std::move(message));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_PROTOCOL:
    case SQLITE_NOLFS: return Status(StatusCode::kIoError, std::move(message));
    default: return internal_error(std::move(message));
  }
}

std::string sqlite_error_name(int rc) {
  if (rc == kOutOfMemoryWithMemoryToSpare)
    return "out of memory (with memory to spare: the file is damaged)";
  return sqlite3_errstr(rc);
}

bool memory_to_spare() {
  constexpr sqlite3_uint64 kProbeBytes = sqlite3_uint64{64} << 20;
  void* probe = sqlite3_malloc64(kProbeBytes);
  sqlite3_free(probe);
  return probe != nullptr;
}

std::string SqliteStatement::column_text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return std::string();
  int bytes = sqlite3_column_bytes(stmt_, column);
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(bytes));
}

int SqliteConnection::open(const std::string& path, int flags, std::string* message) {
  close();
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    *message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);  // a failed open may still allocate a handle
    return blame_file_for_spurious_nomem(rc);
  }
  // Extended codes tell SQLITE_BUSY_RECOVERY from SQLITE_BUSY and name I/O failures precisely.
  sqlite3_extended_result_codes(db, 1);
  db_ = db;
  return SQLITE_OK;
}

int SqliteConnection::prepare(std::string_view sql, SqliteStatement* out) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return blame_file_for_spurious_nomem(rc);
  }
  *out = SqliteStatement(stmt);
  return SQLITE_OK;
}

}  // namespace convplan::detail
