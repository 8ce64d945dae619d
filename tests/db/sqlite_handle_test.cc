#include "db/sqlite_handle.h"

#include <gtest/gtest.h>

#include "db/sqlite_heap_limit.h"

namespace convplan::detail {
namespace {

using convplan::testing::ScopedSqliteHeapLimit;

// SQLite answers some damaged files with SQLITE_NOMEM (CI's fuzzer found one): with memory to
// spare, that is the file's damage, which open() moves aside, not a shortage it must give up on.
TEST(SqliteHandleTest, OutOfMemoryWithMemoryToSpareIsDamage) {
  EXPECT_TRUE(out_of_memory_without_a_shortage(SQLITE_NOMEM));
  Status s = sqlite_status(nullptr, SQLITE_NOMEM, "reading");
  EXPECT_EQ(s.code(), StatusCode::kCorruptData) << s.to_string();
  EXPECT_NE(s.message().find("out of memory (with memory to spare: the file is damaged)"),
            std::string::npos)
      << s.message();
}

TEST(SqliteHandleTest, OutOfMemoryUnderAShortageStaysOutOfMemory) {
  ScopedSqliteHeapLimit shortage(1 << 20);
  EXPECT_FALSE(out_of_memory_without_a_shortage(SQLITE_NOMEM));
  Status s = sqlite_status(nullptr, SQLITE_NOMEM, "reading");
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.to_string();
  EXPECT_EQ(s.message(), "reading: out of memory");
}

TEST(SqliteHandleTest, OnlyOutOfMemoryIsProbed) {
  EXPECT_FALSE(out_of_memory_without_a_shortage(SQLITE_OK));
  EXPECT_FALSE(out_of_memory_without_a_shortage(SQLITE_CORRUPT));
  EXPECT_FALSE(out_of_memory_without_a_shortage(SQLITE_IOERR_NOMEM));  // an I/O error
  EXPECT_EQ(sqlite_error_name(SQLITE_CORRUPT), sqlite3_errstr(SQLITE_CORRUPT));
}

}  // namespace
}  // namespace convplan::detail
