// A SQLite hard heap limit for the length of a scope: a memory shortage on demand, as SQLite sees
// it. Process-wide, so the db tests that use it run in a process of their own (ctest runs each
// test so).
#pragma once

#include <sqlite3.h>

namespace convplan::testing {

class ScopedSqliteHeapLimit {
 public:
  // Allows SQLite `spare_bytes` more than it holds now.
  explicit ScopedSqliteHeapLimit(sqlite3_int64 spare_bytes)
      : soft_(sqlite3_soft_heap_limit64(-1)), hard_(sqlite3_hard_heap_limit64(-1)) {
    sqlite3_hard_heap_limit64(sqlite3_memory_used() + spare_bytes);
  }
  ~ScopedSqliteHeapLimit() {
    sqlite3_hard_heap_limit64(hard_);
    sqlite3_soft_heap_limit64(soft_);
  }
  ScopedSqliteHeapLimit(const ScopedSqliteHeapLimit&) = delete;
  ScopedSqliteHeapLimit& operator=(const ScopedSqliteHeapLimit&) = delete;

 private:
  sqlite3_int64 soft_;
  sqlite3_int64 hard_;
};

}  // namespace convplan::testing
