#include "db/sqlite_handle.h"

#include <gtest/gtest.h>

#include "db/sqlite_heap_limit.h"

namespace convplan::detail {
namespace {

using convplan::testing::ScopedSqliteHeapLimit;

// SQLite answers some damaged files with SQLITE_NOMEM (CI's fuzzer found one): with memory to
// spare, that is the file's damage, which open() moves aside, not a shortage it must give up on.
TEST(SqliteHandleTest, OutOfMemoryWithMemoryToSpareIsDamage) {
  EXPECT_EQ(blame_file_for_spurious_nomem(SQLITE_NOMEM), kOutOfMemoryWithMemoryToSpare);
  Status s = sqlite_status(nullptr, kOutOfMemoryWithMemoryToSpare, "reading");
  EXPECT_EQ(s.code(), StatusCode::kCorruptData) << s.to_string();
  EXPECT_EQ(s.message(), "reading: out of memory (with memory to spare: the file is damaged)");
}

TEST(SqliteHandleTest, OutOfMemoryUnderAShortageStaysOutOfMemory) {
  ScopedSqliteHeapLimit shortage(1 << 20);
  EXPECT_EQ(blame_file_for_spurious_nomem(SQLITE_NOMEM), SQLITE_NOMEM);
}

// The result was classified where it was returned; reporting it does not probe memory again.
TEST(SqliteHandleTest, StatusOfOutOfMemoryIsAShortageWhateverMemoryIsFreeNow) {
  Status s = sqlite_status(nullptr, SQLITE_NOMEM, "reading");
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.to_string();
  EXPECT_EQ(s.message(), "reading: out of memory");
}

TEST(SqliteHandleTest, OnlyOutOfMemoryIsBlamedOnTheFile) {
  EXPECT_EQ(blame_file_for_spurious_nomem(SQLITE_OK), SQLITE_OK);
  EXPECT_EQ(blame_file_for_spurious_nomem(SQLITE_CORRUPT), SQLITE_CORRUPT);
  EXPECT_EQ(blame_file_for_spurious_nomem(SQLITE_IOERR_NOMEM), SQLITE_IOERR_NOMEM);  // I/O
  EXPECT_EQ(blame_file_for_spurious_nomem(kOutOfMemoryWithMemoryToSpare),
            kOutOfMemoryWithMemoryToSpare);
  EXPECT_EQ(sqlite_error_name(SQLITE_CORRUPT), sqlite3_errstr(SQLITE_CORRUPT));
}

// A connection with a statement that fails as SQLite does on some damaged files: "out of memory",
// whatever memory there is.
class SpuriousOutOfMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string message;
    ASSERT_EQ(db_.open(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, &message), SQLITE_OK)
        << message;
    auto fail = [](sqlite3_context* context, int, sqlite3_value**) {
      sqlite3_result_error_nomem(context);
    };
    ASSERT_EQ(sqlite3_create_function_v2(db_.get(), "fail_out_of_memory", 0, SQLITE_UTF8, nullptr,
                                         fail, nullptr, nullptr, nullptr),
              SQLITE_OK);
    ASSERT_EQ(db_.prepare(kFailingSql, &failing_), SQLITE_OK) << db_.last_message();
  }

  static constexpr const char* kFailingSql = "SELECT fail_out_of_memory()";
  SqliteConnection db_;
  SqliteStatement failing_;  // declared after db_: finalized first
};

// One result, one answer: a step that failed short of memory is reported as a shortage after
// memory frees up (reporting it probed again, found memory to spare and called it damage).
TEST_F(SpuriousOutOfMemoryTest, ShortageStaysAShortageWhenMemoryFreesUp) {
  int rc = SQLITE_OK;
  {
    ScopedSqliteHeapLimit shortage(1 << 20);
    rc = failing_.step();
  }
  EXPECT_EQ(rc, SQLITE_NOMEM);
  Status s = sqlite_status(db_.get(), rc, "reading");
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.to_string();
  EXPECT_EQ(s.message(), "reading: out of memory");
}

// And the other way round: damage found with memory to spare stays damage when memory runs out.
TEST_F(SpuriousOutOfMemoryTest, DamageStaysDamageWhenMemoryRunsOut) {
  const int stepped = failing_.step();
  const int executed = db_.exec(kFailingSql);
  EXPECT_EQ(stepped, kOutOfMemoryWithMemoryToSpare);
  EXPECT_EQ(executed, kOutOfMemoryWithMemoryToSpare);
  ScopedSqliteHeapLimit shortage(1 << 20);
  Status s = sqlite_status(db_.get(), stepped, "reading");
  EXPECT_EQ(s.code(), StatusCode::kCorruptData) << s.to_string();
  EXPECT_EQ(s.message(), "reading: out of memory (with memory to spare: the file is damaged)");
}

}  // namespace
}  // namespace convplan::detail
